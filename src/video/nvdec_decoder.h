// Video decoding on the GPU's video engine (NVDEC) through libavcodec's CUDA hwaccel, and the
// automatic choice between it and the CPU. libavcodec loads libcuda at run time, so nothing here
// needs CUDA at build time; a machine without a driver or device gets the CPU backend.
//
// What NVDEC decodes: HEVC (x265 streams, lossless included: transquant bypass is Main-profile
// syntax) of 3 planes (8-bit 4:4:4, Turing and later) with both picture sides within
// kNvdecHevcMinSide..kNvdecHevcMaxSide. Gray (4:0:0) pictures, H.264 4:4:4 and FFV1 are not NVDEC
// formats. The sides are NVIDIA's documented HEVC bounds for the GPUs we design for, not read
// from the device: a stream outside what the device reports fails to initialise NVDEC, and the
// automatic backend then decodes it on the CPU.
#pragma once

#include "base/status.h"
#include "video/video_decoder.h"
#include "video/video_stream.h"

namespace kvc {

inline constexpr uint32_t kNvdecHevcMinSide = kNvdecMinSide;  // video_stream.h: streams are padded to it
inline constexpr uint32_t kNvdecHevcMaxSide = 8192;

// Ok where a CUDA device could be opened; otherwise why not (no driver library, no device).
// Probed once per process.
Status NvdecDeviceStatus();

// Ok for a stream NVDEC decodes (see above), else kUnsupported saying why.
Status NvdecCanDecode(const VideoStreamView& stream);

// "nvdec": NVDEC decodes, frames are copied to host memory. A stream it cannot decode, and any
// device failure, is an error (kUnsupported for what it does not decode or where there is no
// device), never a silent CPU decode; a corrupt stream is an error as on the CPU.
const VideoDecoderBackend& NvdecVideoDecoder();

// "auto", the default: NVDEC for the streams it decodes when a device is present, the CPU for
// the rest. A stream that fails on NVDEC and decodes on the CPU is taken as a device failure:
// the CPU's pixels are returned, the reason is logged (once), and every later stream goes to the
// CPU. Without a device every stream goes to the CPU; the reason is logged once at info level.
const VideoDecoderBackend& AutoVideoDecoder();

}  // namespace kvc
