// Decoder backends for video streams (video_stream.h). The CPU backend runs libavcodec's
// software decoders; the GPU backend (NVDEC, nvdec_decoder.h) implements the same interface, so
// the KV codec and the fetcher never know which engine decoded a chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "libav/video_stream.h"

namespace kvc {

struct VideoDecodeOptions {
  // Threads one call may use, the caller's own among them (its share of the caller's pool: the
  // project sizes its threads in one place). The CPU backend starts that many for an FFV1
  // stream, which decodes a frame's slices in parallel; H.264 and HEVC stay on one (their frame
  // threads earn nothing on KV pictures). The pixels and errors do not depend on it. 1: the
  // calling thread alone.
  uint32_t threads = 1;
};

class VideoDecoderBackend {
 public:
  virtual ~VideoDecoderBackend() = default;
  virtual const char* name() const = 0;
  // Decodes a stream into `out`: `expected_frames` frames of `expected` (planar, cropped to the
  // caller's shape). `stream` is hostile; whatever it holds, `out` is written only within
  // expected_frames * expected.frame_bytes() bytes, and a stream that does not decode to
  // exactly that many frames of that shape is an error. Safe to call from several threads.
  virtual Status Decode(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                        std::span<uint8_t> out) const = 0;
  // The same with options; a backend that cannot use them decodes as Decode does. A name of its
  // own, not an overload, so a backend overriding Decode alone hides nothing.
  virtual Status DecodeWithOptions(std::span<const uint8_t> stream, const PictureShape& expected,
                                   uint32_t expected_frames, std::span<uint8_t> out,
                                   const VideoDecodeOptions& options) const {
    (void)options;
    return Decode(stream, expected, expected_frames, out);
  }
};

// libavcodec's software HEVC, H.264 and FFV1 decoders; one thread per call unless the options
// give an FFV1 stream more. NVDEC and the automatic choice: nvdec_decoder.h.
const VideoDecoderBackend& CpuVideoDecoder();

// Backends by name ("auto", "cpu", "nvdec"); the names, for error messages and --help.
const VideoDecoderBackend* FindVideoDecoder(std::string_view name);
std::vector<std::string> VideoDecoderNames();

// What --video-decoder NAME selects: an unknown name is an error, and so is "nvdec" on a
// machine without a CUDA device (with the reason); "auto" and "cpu" always work.
Result<const VideoDecoderBackend*> SelectVideoDecoder(std::string_view name);

// The backend a decode uses when its CodecContext names none: "auto" until set. Process-wide, as
// the machine's GPU is; SetDefaultVideoDecoder takes a name as SelectVideoDecoder does and leaves
// the default as it was on an error.
Status SetDefaultVideoDecoder(std::string_view name);
const VideoDecoderBackend& DefaultVideoDecoder();

}  // namespace kvc
