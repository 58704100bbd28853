// Fuzz target for the CPU video decoder. Two kinds of input:
//   mode 1, a whole stream (first byte 1, the stream version): the expected shape comes from the
//     stream's own header, capped at 1 MiB of pixels, so header mutations are exercised.
//   mode 2, anything else: the header's checks would stop most mutations before libavcodec, so
//     the stream is assembled around the input. Layout:
//       u8 coder (mod 3) | planes flag in bit 7 (set: 3 planes)
//       u8 width (1..64), u8 height (1..64), u8 decoder threads (1 + low 2 bits; was the frame
//       count)
//       then parts, each u16 length and bytes: the first is the extradata, the rest packets,
//       one per frame (1..64 of them; ParseVideoStream rejects any other packet count at once).
// Decoding either fails as corrupt/unsupported or fills exactly the output; the output is sized
// exactly, so a write past it trips ASan. Mode 2 runs FFV1 on libavcodec's slice threads too,
// whose error paths differ from the single-threaded ones.
// Seeds: fuzz/corpus/video_stream/, written by libav_test --gtest_also_run_disabled_tests
// --gtest_filter=VideoFuzzCorpus.DISABLED_Regenerate.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libav/video_decoder.h"

namespace {

constexpr uint64_t kMaxPixels = uint64_t{1} << 20;

uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

void Decode(std::span<const uint8_t> stream, const kvc::PictureShape& shape, uint32_t frames, uint32_t threads) {
  std::vector<uint8_t> out(shape.frame_bytes() * frames);
  // The automatic backend: where a GPU is present the hostile streams NVDEC takes reach it too.
  const kvc::Status s = kvc::DefaultVideoDecoder().DecodeWithOptions(stream, shape, frames, out, {.threads = threads});
  if (!s.ok() && s.code() != kvc::StatusCode::kCorrupt && s.code() != kvc::StatusCode::kUnsupported) {
    (void)std::fprintf(stderr, "video_stream_fuzz: unexpected status %s\n", s.ToString().c_str());
    std::abort();
  }
}

void WholeStream(const uint8_t* data, size_t size) {
  // version u8, coder u8, planes u8, width u32, height u32, 2 x u32 coded size, frames u32.
  if (size < 27) return;
  const kvc::PictureShape shape{Le32(data + 3), Le32(data + 7), data[2]};
  const uint32_t frames = Le32(data + 23);
  if (shape.planes != 1 && shape.planes != 3) return;
  if (shape.width == 0 || shape.height == 0 || shape.width > kvc::kMaxPictureSide ||
      shape.height > kvc::kMaxPictureSide) {
    return;
  }
  if (frames == 0 || shape.frame_bytes() * frames > kMaxPixels) return;
  Decode({data, size}, shape, frames, 1);
}

void AssembledStream(const uint8_t* data, size_t size) {
  if (size < 4) return;
  const auto coder = static_cast<kvc::VideoCoder>((data[0] & 0x7f) % 3);
  const kvc::PictureShape shape{1u + data[1] % 64, 1u + data[2] % 64, (data[0] & 0x80) ? 3u : 1u};
  std::vector<std::span<const uint8_t>> parts;
  size_t at = 4;
  while (at + 2 <= size) {
    const size_t len = std::min<size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
    parts.emplace_back(data + at + 2, len);
    at += 2 + len;
  }
  if (parts.empty()) return;
  std::vector<std::span<const uint8_t>> packets;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!parts[i].empty()) packets.push_back(parts[i]);
  }
  if (packets.empty() || packets.size() > 64) return;
  const auto frames = static_cast<uint32_t>(packets.size());
  const std::vector<uint8_t> stream = kvc::AssembleVideoStream(coder, shape, frames, parts[0], packets);
  Decode(stream, shape, frames, 1u + (data[3] & 3u));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == 1) {
    WholeStream(data, size);
  } else {
    AssembledStream(data, size);
  }
  return 0;
}
