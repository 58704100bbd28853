// Decoder backends for video streams (video_stream.h). The CPU backend runs libavcodec's
// software decoders; a GPU backend (NVDEC) implements the same interface, so the KV codec and
// the fetcher never know which engine decoded a chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "video/video_stream.h"

namespace kvc {

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
};

// libavcodec's software HEVC, H.264 and FFV1 decoders, one thread per call.
const VideoDecoderBackend& CpuVideoDecoder();

// Backends by name ("cpu"); the names this build has, for error messages and --help.
const VideoDecoderBackend* FindVideoDecoder(std::string_view name);
std::vector<std::string> VideoDecoderNames();

}  // namespace kvc
