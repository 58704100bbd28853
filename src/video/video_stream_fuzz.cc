// Fuzz target for the CPU video decoder on arbitrary streams. The expected shape comes from the
// stream's own header (so mutations reach libavcodec rather than stopping at the shape check),
// capped at 1 MiB of pixels. Decoding either fails as corrupt/unsupported or fills exactly the
// output; the output buffer is sized exactly, so any write past it trips ASan.
// Seeds: fuzz/corpus/video_stream/, written by video_test --gtest_also_run_disabled_tests
// --gtest_filter=VideoFuzzCorpus.DISABLED_Regenerate.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "video/video_decoder.h"

namespace {

constexpr uint64_t kMaxPixels = uint64_t{1} << 20;

uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // version u8, coder u8, planes u8, width u32, height u32 (video_stream.cc).
  if (size < 11) return 0;
  const kvc::PictureShape shape{Le32(data + 3), Le32(data + 7), data[2]};
  const uint32_t frames = size >= 27 ? Le32(data + 23) : 1;
  if (shape.planes != 1 && shape.planes != 3) return 0;
  if (shape.width == 0 || shape.height == 0 || shape.width > kvc::kMaxPictureSide || shape.height > kvc::kMaxPictureSide) {
    return 0;
  }
  if (frames == 0 || shape.frame_bytes() * frames > kMaxPixels) return 0;
  std::vector<uint8_t> out(shape.frame_bytes() * frames);
  const kvc::Status s = kvc::CpuVideoDecoder().Decode(std::span(data, size), shape, frames, out);
  if (!s.ok() && s.code() != kvc::StatusCode::kCorrupt && s.code() != kvc::StatusCode::kUnsupported) {
    (void)std::fprintf(stderr, "video_stream_fuzz: unexpected status %s\n", s.ToString().c_str());
    std::abort();
  }
  return 0;
}
