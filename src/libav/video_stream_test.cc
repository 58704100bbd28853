#include "libav/video_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "libav/video_decoder.h"

namespace kvc {
namespace {

// Pixels that exercise prediction (a gradient plus noise) or defeat it (uniform noise).
std::vector<uint8_t> MakePixels(const PictureShape& shape, uint32_t n_frames, bool noisy, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(shape.frame_bytes() * n_frames);
  for (size_t i = 0; i < px.size(); ++i) {
    px[i] = noisy ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((i % 97) + (rng() % 5));
  }
  return px;
}

struct Case {
  uint32_t width, height, planes, frames;
};

class VideoRoundTrip : public ::testing::TestWithParam<VideoCoder> {};

// Every size the KV layouts produce is small or odd somewhere: 1-pixel sides, sides below each
// codec's minimum, sides one past an alignment, 2-row pictures.
TEST_P(VideoRoundTrip, BitExactAtTinyAndOddSizes) {
  const VideoCoder coder = GetParam();
  const Case cases[] = {{1, 1, 1, 1},     {1, 1, 3, 2},   {3, 2, 1, 3},   {2, 64, 3, 2}, {64, 2, 1, 4},
                        {5, 7, 3, 5},     {16, 16, 1, 2}, {17, 33, 3, 3}, {31, 9, 1, 6}, {128, 8, 3, 3},
                        {256, 128, 1, 2}, {8, 16, 3, 17}, {65, 3, 1, 3},  {7, 1, 1, 2},  {1, 9, 3, 2}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (bool noisy : {false, true}) {
      const PictureShape shape{c.width, c.height, c.planes};
      const auto px = MakePixels(shape, c.frames, noisy, seed++);
      auto stream = EncodeVideoStream(shape, c.frames, px, {.coder = coder, .preset = "ultrafast"});
      ASSERT_TRUE(stream.ok()) << VideoCoderName(coder) << " " << c.width << "x" << c.height << ": "
                               << stream.status().ToString();
      std::vector<uint8_t> back(px.size(), 0xAB);
      const Status s = CpuVideoDecoder().Decode(*stream, shape, c.frames, back);
      ASSERT_TRUE(s.ok()) << VideoCoderName(coder) << " " << c.width << "x" << c.height << "x" << c.planes << ": "
                          << s.ToString();
      EXPECT_EQ(back, px) << VideoCoderName(coder) << " " << c.width << "x" << c.height << "x" << c.planes << " frames "
                          << c.frames << (noisy ? " noisy" : " smooth");
    }
  }
}

// Every small picture size, noisy pixels: each codec's minimum and alignment padding must give
// back every pixel (FFV1 mis-decodes sides of 1 or 2 pixels, which a handful of sizes missed).
TEST_P(VideoRoundTrip, BitExactAtEverySmallSize) {
  const VideoCoder coder = GetParam();
  uint32_t seed = 100;
  for (uint32_t w = 1; w <= 20; ++w) {
    for (uint32_t h = 1; h <= 9; ++h) {
      const PictureShape shape{w, h, (w + h) % 2 == 0 ? 3u : 1u};
      const uint32_t frames = 1 + (w * h) % 2;
      const auto px = MakePixels(shape, frames, true, seed++);
      auto stream = EncodeVideoStream(shape, frames, px, {.coder = coder, .preset = "ultrafast"});
      ASSERT_TRUE(stream.ok()) << stream.status().ToString();
      std::vector<uint8_t> back(px.size());
      ASSERT_TRUE(CpuVideoDecoder().Decode(*stream, shape, frames, back).ok());
      EXPECT_EQ(back, px) << VideoCoderName(coder) << " " << w << "x" << h << "x" << shape.planes;
    }
  }
}

TEST_P(VideoRoundTrip, EncodingTwiceGivesTheSameBytes) {
  const PictureShape shape{40, 24, 3};
  const auto px = MakePixels(shape, 6, false, 7);
  auto a = EncodeVideoStream(shape, 6, px, {.coder = GetParam()});
  auto b = EncodeVideoStream(shape, 6, px, {.coder = GetParam()});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_P(VideoRoundTrip, PredictablePicturesCompress) {
  const PictureShape shape{64, 64, 1};
  std::vector<uint8_t> px(shape.frame_bytes() * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i % 64);
  auto s = EncodeVideoStream(shape, 4, px, {.coder = GetParam()});
  ASSERT_TRUE(s.ok());
  EXPECT_LT(s->size(), px.size() / 4) << VideoCoderName(GetParam());
}

// A stream that disagrees with what the caller expects, or is cut short, is an error and never
// writes outside the output.
TEST_P(VideoRoundTrip, MismatchedOrTruncatedStreamsAreErrors) {
  const PictureShape shape{20, 12, 3};
  const auto px = MakePixels(shape, 3, false, 3);
  auto stream = EncodeVideoStream(shape, 3, px, {.coder = GetParam()});
  ASSERT_TRUE(stream.ok());
  std::vector<uint8_t> out(px.size());
  EXPECT_EQ(CpuVideoDecoder().Decode(*stream, {20, 12, 1}, 3, std::span(out).first(20 * 12 * 3)).code(),
            StatusCode::kCorrupt);
  std::vector<uint8_t> four(shape.frame_bytes() * 4);
  EXPECT_EQ(CpuVideoDecoder().Decode(*stream, shape, 4, four).code(), StatusCode::kCorrupt);
  for (size_t cut : {size_t{0}, size_t{5}, stream->size() / 2, stream->size() - 1}) {
    const std::span<const uint8_t> part(stream->data(), cut);
    EXPECT_FALSE(CpuVideoDecoder().Decode(part, shape, 3, out).ok()) << "cut at " << cut;
  }
}

// Encoders write one packet per frame: a stream with fewer (or more) packets than frames is
// rejected on its header, before anything is decoded or allocated, so a stream's frame count
// (which sizes the decoder's output) is backed by at least 5 bytes a frame.
TEST_P(VideoRoundTrip, OnePacketPerFrame) {
  const PictureShape shape{20, 12, 1};
  const auto px = MakePixels(shape, 3, false, 4);
  auto stream = EncodeVideoStream(shape, 3, px, {.coder = GetParam(), .preset = "ultrafast"});
  ASSERT_TRUE(stream.ok());
  const VideoStreamView v = ParseVideoStream(*stream, shape, 3).value();
  ASSERT_EQ(v.packets.size(), 3u);
  for (size_t keep : {size_t{1}, size_t{2}}) {
    const auto fewer = AssembleVideoStream(v.coder, shape, 3, v.extradata, std::span(v.packets).first(keep));
    const auto r = ParseVideoStream(fewer, shape, 3);
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(r.status().message().find(std::to_string(keep) + " packets for 3 frames"), std::string::npos)
        << r.status().message();
  }
  // A stream claiming 2^22 frames in a few hundred bytes.
  const auto many = AssembleVideoStream(v.coder, shape, 1u << 22, v.extradata, v.packets);
  EXPECT_EQ(ParseVideoStream(many, shape, 1u << 22).status().code(), StatusCode::kCorrupt);
}

// Any thread count (FFV1 slice threads; H.264 and HEVC stay on one) gives the same pixels as one
// thread, more threads than slices included.
TEST_P(VideoRoundTrip, ThreadedDecodeGivesTheSamePixels) {
  const VideoCoder coder = GetParam();
  for (const Case& c : {Case{256, 64, 1, 6}, Case{40, 24, 3, 5}, Case{17, 9, 1, 1}}) {
    const PictureShape shape{c.width, c.height, c.planes};
    const auto px = MakePixels(shape, c.frames, false, c.width);
    auto stream = EncodeVideoStream(shape, c.frames, px, {.coder = coder, .preset = "ultrafast"});
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    for (uint32_t threads : {1u, 2u, 3u, 4u, 64u}) {
      std::vector<uint8_t> back(px.size(), 0xAB);
      const Status st = CpuVideoDecoder().DecodeWithOptions(*stream, shape, c.frames, back, {.threads = threads});
      ASSERT_TRUE(st.ok()) << VideoCoderName(coder) << " threads " << threads << ": " << st.ToString();
      EXPECT_EQ(back, px) << VideoCoderName(coder) << " " << c.width << "x" << c.height << "x" << c.planes
                          << " threads " << threads;
    }
  }
}

// A damaged stream is as much an error with threads as without: whatever a single-threaded
// decode rejects, a threaded one rejects too (cut packets, flipped bytes, shape mismatches).
TEST_P(VideoRoundTrip, ThreadedDecodeRejectsWhatOneThreadRejects) {
  const VideoCoder coder = GetParam();
  const PictureShape shape{48, 20, 1};
  const auto px = MakePixels(shape, 4, true, 11);
  auto stream = EncodeVideoStream(shape, 4, px, {.coder = coder, .preset = "ultrafast"});
  ASSERT_TRUE(stream.ok());
  const VideoStreamView v = ParseVideoStream(*stream, shape, 4).value();
  std::vector<std::vector<uint8_t>> damaged;
  for (size_t cut : {size_t{5}, stream->size() / 2, stream->size() - 1}) {
    damaged.emplace_back(stream->begin(), stream->begin() + static_cast<ptrdiff_t>(cut));
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 40; ++i) {
    std::vector<std::vector<uint8_t>> packets;
    for (const auto& p : v.packets) packets.emplace_back(p.begin(), p.end());
    auto& p = packets[rng() % packets.size()];
    if (i % 2 == 0) {
      p[rng() % p.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    } else {
      p.resize(std::max<size_t>(1, p.size() / 2));
    }
    std::vector<std::span<const uint8_t>> views(packets.begin(), packets.end());
    damaged.push_back(AssembleVideoStream(coder, shape, 4, v.extradata, views));
  }
  std::vector<uint8_t> out(px.size());
  size_t rejected = 0;
  for (size_t i = 0; i < damaged.size(); ++i) {
    const Status one = CpuVideoDecoder().Decode(damaged[i], shape, 4, out);
    if (one.ok()) continue;
    ++rejected;
    for (uint32_t threads : {2u, 4u}) {
      const Status many = CpuVideoDecoder().DecodeWithOptions(damaged[i], shape, 4, out, {.threads = threads});
      EXPECT_FALSE(many.ok()) << VideoCoderName(coder) << " damage " << i << " threads " << threads
                              << ": one thread says " << one.ToString();
    }
  }
  EXPECT_GE(rejected, 3u) << "every cut stream is an error";
}

INSTANTIATE_TEST_SUITE_P(Coders, VideoRoundTrip, ::testing::ValuesIn(kVideoCoders),
                         [](const auto& info) { return std::string(VideoCoderName(info.param)); });

TEST(VideoCoderNames, RoundTrip) {
  for (VideoCoder c : kVideoCoders) EXPECT_EQ(ParseVideoCoder(VideoCoderName(c)), c);
  EXPECT_FALSE(ParseVideoCoder("vp9").has_value());
  EXPECT_EQ(FindVideoDecoder("cpu"), &CpuVideoDecoder());
  EXPECT_EQ(FindVideoDecoder("vdpau"), nullptr);
}

TEST(VideoStream, ExpectedShapeMustBeOneAnEncoderMakes) {
  const PictureShape shape{20, 12, 1};
  auto stream = EncodeVideoStream(shape, 1, MakePixels(shape, 1, false, 5), {});
  ASSERT_TRUE(stream.ok());
  for (const PictureShape& bad :
       {PictureShape{0, 12, 1}, PictureShape{20, 0, 1}, PictureShape{kMaxPictureSide + 1, 12, 1},
        PictureShape{20, kMaxPictureSide + 1, 1}, PictureShape{20, 12, 2}}) {
    EXPECT_EQ(ParseVideoStream(*stream, bad, 1).status().code(), StatusCode::kInvalidArgument)
        << bad.width << "x" << bad.height << "x" << bad.planes;
  }
}

// Every FFV1 entropy coder, context model and slice count is lossless and decodes with any
// number of threads; the stream (extradata) says which were used, the decoder needs no option.
TEST(VideoEncode, Ffv1OptionsRoundTrip) {
  for (uint32_t planes : {1u, 3u}) {
    const PictureShape shape{70, 36, planes};
    const auto px = MakePixels(shape, 3, false, planes);
    for (Ffv1Coder coder : {Ffv1Coder::kRangeTable, Ffv1Coder::kRangeDefault, Ffv1Coder::kGolomb}) {
      for (uint32_t slices : {0u, 1u, 4u, 6u, 9u, 16u}) {
        for (bool large : {false, true}) {
          const std::string what = std::string(Ffv1CoderName(coder)) + " slices " + std::to_string(slices) +
                                   (large ? " large" : " small") + " planes " + std::to_string(planes);
          auto stream = EncodeVideoStream(shape, 3, px,
                                          {.ffv1_slices = slices, .ffv1_coder = coder, .ffv1_large_context = large});
          ASSERT_TRUE(stream.ok()) << what << ": " << stream.status().ToString();
          for (uint32_t threads : {1u, 3u}) {
            std::vector<uint8_t> back(px.size());
            ASSERT_TRUE(CpuVideoDecoder().DecodeWithOptions(*stream, shape, 3, back, {.threads = threads}).ok())
                << what;
            EXPECT_EQ(back, px) << what << " threads " << threads;
          }
        }
      }
    }
  }
}

TEST(VideoEncode, Ffv1SliceCounts) {
  const PictureShape shape{256, 64, 1};
  const auto px = MakePixels(shape, 2, false, 9);
  // libavcodec's own choice for a KV picture is 2 x 2: what every stream before the option held.
  EXPECT_EQ(EncodeVideoStream(shape, 2, px, {}).value(), EncodeVideoStream(shape, 2, px, {.ffv1_slices = 4}).value());
  EXPECT_NE(EncodeVideoStream(shape, 2, px, {}).value(), EncodeVideoStream(shape, 2, px, {.ffv1_slices = 1}).value());
  for (uint32_t bad : {2u, 3u, 5u, kMaxFfv1Slices + 1}) {
    const auto r = EncodeVideoStream(shape, 2, px, {.ffv1_slices = bad});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad << " slices: " << r.status().ToString();
  }
  // One slice only up to 352x288; a larger picture is cut into at least 2 x 2.
  const PictureShape large{400, 8, 1};
  EXPECT_EQ(EncodeVideoStream(large, 1, MakePixels(large, 1, false, 1), {.ffv1_slices = 1}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(VideoEncode, Ffv1CoderNames) {
  for (Ffv1Coder c : {Ffv1Coder::kRangeTable, Ffv1Coder::kRangeDefault, Ffv1Coder::kGolomb}) {
    EXPECT_EQ(ParseFfv1Coder(Ffv1CoderName(c)), c);
  }
  EXPECT_FALSE(ParseFfv1Coder("huffman").has_value());
}

TEST(VideoEncode, RejectsBadInput) {
  const std::vector<uint8_t> px(12);
  EXPECT_EQ(EncodeVideoStream({2, 2, 2}, 1, px, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeVideoStream({2, 2, 3}, 2, px, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeVideoStream({0, 2, 1}, 1, {}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeVideoStream({2, 2, 3}, 0, {}, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

const std::filesystem::path kCorpus = std::filesystem::path(KVCODEC_SOURCE_DIR) / "fuzz" / "corpus" / "video_stream";

struct Seed {
  std::string name;
  PictureShape shape;
  std::vector<uint8_t> bytes;
};

// The assembled-stream input of video_stream_fuzz.cc (mode 2); keep in step with its parser.
std::vector<uint8_t> AssembledInput(VideoCoder coder, const PictureShape& shape, uint32_t frames,
                                    std::span<const uint8_t> stream) {
  const VideoStreamView v = ParseVideoStream(stream, shape, frames).value();
  std::vector<uint8_t> in = {static_cast<uint8_t>(static_cast<uint8_t>(coder) | (shape.planes == 3 ? 0x80 : 0)),
                             static_cast<uint8_t>(shape.width - 1), static_cast<uint8_t>(shape.height - 1),
                             static_cast<uint8_t>(frames - 1)};
  auto part = [&](std::span<const uint8_t> p) {
    in.push_back(static_cast<uint8_t>(p.size()));
    in.push_back(static_cast<uint8_t>(p.size() >> 8));
    in.insert(in.end(), p.begin(), p.end());
  };
  part(v.extradata);
  for (const auto& p : v.packets) part(p);
  return in;
}

// Small real streams of every coder, planes 1 and 3, whole and assembled; each must decode.
std::vector<Seed> SeedInputs() {
  std::vector<Seed> seeds;
  for (VideoCoder coder : kVideoCoders) {
    for (uint32_t planes : {1u, 3u}) {
      const PictureShape shape{12, 5, planes};
      const auto px = MakePixels(shape, 3, false, planes);
      auto s = EncodeVideoStream(shape, 3, px, {.coder = coder, .preset = "ultrafast"});
      if (!s.ok()) continue;
      const std::string name = std::string(VideoCoderName(coder)) + "_p" + std::to_string(planes);
      seeds.push_back({"assembled_" + name, shape, AssembledInput(coder, shape, 3, *s)});
      seeds.push_back({name, shape, std::move(*s)});
    }
  }
  return seeds;
}

TEST(VideoFuzzCorpus, SeedsDecode) {
  for (const Seed& seed : SeedInputs()) {
    std::ifstream in(kCorpus / seed.name, std::ios::binary);
    ASSERT_TRUE(in) << seed.name << " missing (regenerate: libav_test --gtest_also_run_disabled_tests "
                    << "--gtest_filter=VideoFuzzCorpus.DISABLED_Regenerate)";
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (seed.name.starts_with("assembled_")) continue;  // the same stream as its whole twin
    std::vector<uint8_t> out(seed.shape.frame_bytes() * 3);
    EXPECT_TRUE(CpuVideoDecoder().Decode(bytes, seed.shape, 3, out).ok()) << seed.name;
  }
}

// The seeds are streams of the format as it was first written: the encoder's default options
// still write them byte for byte, and they decode alike on any number of threads.
TEST(VideoFuzzCorpus, DefaultOptionsWriteTheSeedsAndThreadsDecodeThem) {
  for (const Seed& seed : SeedInputs()) {
    std::ifstream in(kCorpus / seed.name, std::ios::binary);
    ASSERT_TRUE(in) << seed.name;
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_EQ(bytes, seed.bytes) << seed.name;
    if (seed.name.starts_with("assembled_")) continue;
    std::vector<uint8_t> one(seed.shape.frame_bytes() * 3);
    ASSERT_TRUE(CpuVideoDecoder().Decode(bytes, seed.shape, 3, one).ok()) << seed.name;
    for (uint32_t threads : {2u, 4u}) {
      std::vector<uint8_t> many(one.size());
      ASSERT_TRUE(CpuVideoDecoder().DecodeWithOptions(bytes, seed.shape, 3, many, {.threads = threads}).ok())
          << seed.name;
      EXPECT_EQ(many, one) << seed.name << " threads " << threads;
    }
  }
}

TEST(VideoFuzzCorpus, DISABLED_Regenerate) {
  std::filesystem::create_directories(kCorpus);
  for (const Seed& seed : SeedInputs()) {
    std::ofstream(kCorpus / seed.name, std::ios::binary)
        .write(reinterpret_cast<const char*>(seed.bytes.data()), static_cast<std::streamsize>(seed.bytes.size()));
  }
}

}  // namespace
}  // namespace kvc
