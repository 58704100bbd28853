// Video decoding on the GPU's video engine (NVDEC) through libavcodec's CUDA hwaccel, and the
// automatic choice between it and the CPU. libavcodec loads libcuda at run time, so nothing here
// needs CUDA at build time; a machine without a driver or device gets the CPU backend.
//
// What NVDEC decodes: HEVC (x265 streams, lossless included: transquant bypass is Main-profile
// syntax) of 3 planes (8-bit 4:4:4, Turing and later) with both picture sides within
// kNvdecHevcMinSide..kNvdecHevcMaxSide. Gray (4:0:0) pictures, H.264 4:4:4 and FFV1 are not NVDEC
// formats. The sides are NVIDIA's documented HEVC bounds for the GPUs we design for (streams are
// padded to the minimum, video_stream.h); the device's own bounds are read at run time
// (cuvidGetDecoderCaps) and a stream outside them goes to the CPU under "auto", or is
// kUnsupported on "nvdec".
#pragma once

#include <functional>
#include <span>

#include "base/status.h"
#include "libav/video_decoder.h"
#include "libav/video_stream.h"

namespace kvc {

inline constexpr uint32_t kNvdecHevcMinSide = kNvdecMinSide;  // video_stream.h: streams are padded to it
inline constexpr uint32_t kNvdecHevcMaxSide = 8192;

// Ok where a CUDA device could be opened and its NVDEC decodes 8-bit 4:4:4 HEVC; otherwise why
// not (no driver library, no device, no such decoder). Probed once per process.
Status NvdecDeviceStatus();

// What the device reports for 8-bit 4:4:4 HEVC: coded picture bounds and NVDEC engines.
struct NvdecCaps {
  uint32_t min_width = kNvdecHevcMinSide, min_height = kNvdecHevcMinSide;
  uint32_t max_width = kNvdecHevcMaxSide, max_height = kNvdecHevcMaxSide;
  uint32_t max_macroblocks = (kNvdecHevcMaxSide / 16) * (kNvdecHevcMaxSide / 16);
  uint32_t engines = 0;
};
Result<NvdecCaps> NvdecDeviceCaps();

// Ok for a stream NVDEC decodes (see above), else kUnsupported saying why.
Status NvdecCanDecode(const VideoStreamView& stream);

// "nvdec": NVDEC decodes, frames are copied to host memory. A stream it cannot decode, and any
// device failure, is an error (kUnsupported for what it does not decode or where there is no
// device), never a silent CPU decode; a corrupt stream is an error as on the CPU.
const VideoDecoderBackend& NvdecVideoDecoder();

// A decoded frame where NVDEC put it, for a caller that consumes frames on the GPU: valid only
// during the callback (the surface returns to the decoder after it). Planar 8-bit 4:4:4 at the
// coded size; the caller's picture is its top-left `picture.width` x `picture.height`.
struct NvdecDeviceFrame {
  uint32_t index = 0;       // frame number in the stream
  uint64_t planes[3] = {};  // CUdeviceptr of each plane (three layers of a KV picture)
  uint32_t pitch[3] = {};   // bytes from one row to the next
  uint32_t coded_width = 0, coded_height = 0;
  PictureShape picture;
};
// Decodes a stream on NVDEC and hands over each frame in device memory, in order: exactly
// `expected_frames` frames or an error (the same checks as Decode; kUnsupported without a
// device or for a stream NVDEC does not take). An error from on_frame stops the decode.
Status NvdecDecodeToDevice(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                           const std::function<Status(const NvdecDeviceFrame&)>& on_frame);

// "auto", the default: NVDEC for the streams it decodes when a device is present, the CPU for
// the rest. A stream that fails on NVDEC and decodes on the CPU is taken as a device failure:
// the CPU's pixels are returned, the reason is logged (once), and every later stream goes to the
// CPU. Without a device every stream goes to the CPU; the reason is logged once at info level.
const VideoDecoderBackend& AutoVideoDecoder();

}  // namespace kvc
