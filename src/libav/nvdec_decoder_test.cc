#include "libav/nvdec_decoder.h"

#include <gtest/gtest.h>

#include <random>

namespace kvc {
namespace {

std::vector<uint8_t> Pixels(const PictureShape& shape, uint32_t frames, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(shape.frame_bytes() * frames);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i % 89) + (rng() % 7));
  return px;
}

std::vector<uint8_t> Encode(VideoCoder coder, const PictureShape& shape, uint32_t frames, uint32_t seed) {
  auto stream = EncodeVideoStream(shape, frames, Pixels(shape, frames, seed), {.coder = coder, .preset = "ultrafast"});
  EXPECT_TRUE(stream.ok()) << stream.status().ToString();
  return stream.ok() ? *stream : std::vector<uint8_t>{};
}

TEST(VideoDecoderSelection, NamesAndUnknownNames) {
  EXPECT_EQ(FindVideoDecoder("auto"), &AutoVideoDecoder());
  EXPECT_EQ(FindVideoDecoder("nvdec"), &NvdecVideoDecoder());
  EXPECT_EQ(VideoDecoderNames(), (std::vector<std::string>{"auto", "cpu", "nvdec"}));
  EXPECT_EQ(SelectVideoDecoder("auto").value(), &AutoVideoDecoder());
  EXPECT_EQ(SelectVideoDecoder("cpu").value(), &CpuVideoDecoder());
  const auto unknown = SelectVideoDecoder("cuvid");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("auto, cpu or nvdec"), std::string::npos);
  EXPECT_EQ(&DefaultVideoDecoder(), &AutoVideoDecoder());
  EXPECT_FALSE(SetDefaultVideoDecoder("cuvid").ok());
  EXPECT_EQ(&DefaultVideoDecoder(), &AutoVideoDecoder()) << "a refused name changed the default";
  ASSERT_TRUE(SetDefaultVideoDecoder("cpu").ok());
  EXPECT_EQ(&DefaultVideoDecoder(), &CpuVideoDecoder());
  ASSERT_TRUE(SetDefaultVideoDecoder("auto").ok());
}

// Without a CUDA device (this machine, CI): nvdec by name is an error that says why, a decode on
// it is kUnsupported, and the default stays usable.
TEST(VideoDecoderSelection, NvdecWithoutADeviceIsAClearError) {
  if (NvdecDeviceStatus().ok()) GTEST_SKIP() << "a CUDA device is present: the no-device path is not reachable here";
  EXPECT_EQ(NvdecDeviceStatus().code(), StatusCode::kUnsupported);
  const auto nvdec = SelectVideoDecoder("nvdec");
  ASSERT_FALSE(nvdec.ok());
  EXPECT_NE(nvdec.status().message().find("--video-decoder nvdec"), std::string::npos) << nvdec.status().ToString();
  EXPECT_NE(nvdec.status().message().find(NvdecDeviceStatus().message()), std::string::npos);
  EXPECT_FALSE(SetDefaultVideoDecoder("nvdec").ok());
  EXPECT_EQ(&DefaultVideoDecoder(), &AutoVideoDecoder());
  EXPECT_EQ(NvdecDeviceCaps().status().message(), NvdecDeviceStatus().message());
  const PictureShape shape{160, 144, 3};
  const auto stream = Encode(VideoCoder::kX265, shape, 2, 3);
  std::vector<uint8_t> out(shape.frame_bytes() * 2);
  EXPECT_EQ(NvdecVideoDecoder().Decode(stream, shape, 2, out).code(), StatusCode::kUnsupported);
  int frames = 0;
  const auto count = [&](const NvdecDeviceFrame&) {
    ++frames;
    return Status::Ok();
  };
  EXPECT_EQ(NvdecDecodeToDevice(stream, shape, 2, count).code(), StatusCode::kUnsupported);
  EXPECT_EQ(frames, 0);
}

// What NVDEC decodes: 3-plane HEVC within its sizes; gray HEVC, H.264, FFV1 and pictures under
// the minimum side are refused with the reason, before any device is touched.
TEST(NvdecCanDecode, HevcOfThreePlanesWithinItsSizesOnly) {
  struct Case {
    VideoCoder coder;
    PictureShape shape;
    bool decodable;
  };
  const Case cases[] = {{VideoCoder::kX265, {256, 256, 3}, true},  {VideoCoder::kX265, {144, 144, 3}, true},
                        {VideoCoder::kX265, {256, 256, 1}, false}, {VideoCoder::kX265, {256, 64, 3}, false},
                        {VideoCoder::kX265, {100, 200, 3}, false}, {VideoCoder::kX264, {256, 256, 3}, false},
                        {VideoCoder::kFfv1, {256, 256, 3}, false}};
  for (const Case& c : cases) {
    const auto stream = Encode(c.coder, c.shape, 1, 5);
    const auto view = ParseVideoStream(stream, c.shape, 1);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    const Status can = NvdecCanDecode(*view);
    EXPECT_EQ(can.ok(), c.decodable) << VideoCoderName(c.coder) << " " << c.shape.width << "x" << c.shape.height << "x"
                                     << c.shape.planes << ": " << can.ToString();
    if (!c.decodable) {
      EXPECT_EQ(can.code(), StatusCode::kUnsupported);
    }
  }
}

// Streams padded for NVDEC: any x265 picture, however small, is coded at least 144 pixels a side,
// decodes bit-exactly (cropped back) and is one NVDEC takes; the padding is refused for other
// coders, and a decoder accepts no coded size but the two paddings.
TEST(NvdecCanDecode, X265StreamsPaddedToItsSmallestSide) {
  for (const PictureShape shape : {PictureShape{64, 32, 3}, PictureShape{1, 1, 3}, PictureShape{300, 20, 3}}) {
    const auto px = Pixels(shape, 2, 9);
    auto stream =
        EncodeVideoStream(shape, 2, px, {.coder = VideoCoder::kX265, .preset = "ultrafast", .nvdec_sizes = true});
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    const auto view = ParseVideoStream(*stream, shape, 2);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_GE(view->coded.width, kNvdecMinSide);
    EXPECT_GE(view->coded.height, kNvdecMinSide);
    EXPECT_TRUE(NvdecCanDecode(*view).ok()) << NvdecCanDecode(*view).ToString();
    std::vector<uint8_t> back(px.size(), 0xAB);
    ASSERT_TRUE(CpuVideoDecoder().Decode(*stream, shape, 2, back).ok());
    EXPECT_EQ(back, px);
    ASSERT_TRUE(AutoVideoDecoder().Decode(*stream, shape, 2, back).ok());
    EXPECT_EQ(back, px);
  }
  const PictureShape shape{64, 32, 3};
  const auto px = Pixels(shape, 1, 10);
  for (VideoCoder coder : {VideoCoder::kX264, VideoCoder::kFfv1}) {
    EXPECT_EQ(EncodeVideoStream(shape, 1, px, {.coder = coder, .nvdec_sizes = true}).status().code(),
              StatusCode::kInvalidArgument);
  }
  // A header claiming a padding of neither kind: corrupt, before anything is decoded.
  const auto packet = std::vector<uint8_t>{1, 2, 3};
  const std::span<const uint8_t> packets[] = {packet};
  auto odd = AssembleVideoStream(VideoCoder::kX265, shape, 1, {}, packets);
  const size_t coded_width_at = 3 + 8;  // version, coder, planes, then width and height
  odd[coded_width_at] = 96;             // 96 wide: neither 64 nor 144
  EXPECT_EQ(ParseVideoStream(odd, shape, 1).status().code(), StatusCode::kCorrupt);
}

// The automatic backend gives the CPU decoder's pixels for every coder and plane count (with a
// device, the HEVC 4:4:4 streams go through NVDEC and must match too), and the CPU's error for a
// damaged stream.
TEST(AutoVideoDecoder, SamePixelsAsTheCpuAndTheSameErrors) {
  uint32_t seed = 11;
  for (VideoCoder coder : kVideoCoders) {
    for (const PictureShape shape : {PictureShape{160, 144, 3}, PictureShape{48, 20, 1}, PictureShape{256, 160, 3}}) {
      SCOPED_TRACE(std::string(VideoCoderName(coder)) + " " + std::to_string(shape.width) + "x" +
                   std::to_string(shape.height) + "x" + std::to_string(shape.planes));
      auto stream = Encode(coder, shape, 3, seed++);
      std::vector<uint8_t> cpu(shape.frame_bytes() * 3), automatic(cpu.size(), 0xCD);
      ASSERT_TRUE(CpuVideoDecoder().Decode(stream, shape, 3, cpu).ok());
      const Status s = AutoVideoDecoder().Decode(stream, shape, 3, automatic);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(automatic, cpu);
      stream.resize(stream.size() - 7);  // the last packet cut short
      EXPECT_FALSE(AutoVideoDecoder().Decode(stream, shape, 3, automatic).ok());
    }
  }
}

// NVDEC's pixels are the CPU decoder's, bit for bit, for lossless HEVC 4:4:4 streams of the
// sizes KV layouts make (token-axis pictures: a chunk's tokens wide, a layer's channels high).
// Only where a CUDA device is present; elsewhere it reports skipped, never passed.
TEST(NvdecVideoDecoder, BitExactAgainstTheCpu) {
  if (Status device = NvdecDeviceStatus(); !device.ok()) GTEST_SKIP() << "no NVDEC here: " << device.ToString();
  // What the device reports, for scripts/gpu_check.sh (the test's JSON output carries it).
  const NvdecCaps caps = NvdecDeviceCaps().value();
  RecordProperty("nvdec_engines", static_cast<int>(caps.engines));
  RecordProperty("hevc444_min", std::to_string(caps.min_width) + "x" + std::to_string(caps.min_height));
  RecordProperty("hevc444_max", std::to_string(caps.max_width) + "x" + std::to_string(caps.max_height));
  EXPECT_LE(caps.min_width, kNvdecMinSide) << "the padding streams get is below this device's minimum";
  EXPECT_LE(caps.min_height, kNvdecMinSide);
  uint32_t seed = 21;
  for (const PictureShape shape :
       {PictureShape{256, 256, 3}, PictureShape{144, 144, 3}, PictureShape{256, 512, 3}, PictureShape{1024, 160, 3}}) {
    for (uint32_t frames : {1u, 5u}) {
      SCOPED_TRACE(std::to_string(shape.width) + "x" + std::to_string(shape.height) + " frames " +
                   std::to_string(frames));
      const auto px = Pixels(shape, frames, seed++);
      const auto stream = EncodeVideoStream(shape, frames, px, {.coder = VideoCoder::kX265, .preset = "medium"});
      ASSERT_TRUE(stream.ok()) << stream.status().ToString();
      std::vector<uint8_t> gpu(px.size(), 0xAB);
      const Status s = NvdecVideoDecoder().Decode(*stream, shape, frames, gpu);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(gpu, px);
      // Left in device memory: every frame, in order, at the coded size, three planes.
      std::vector<uint32_t> seen;
      const Status on_device = NvdecDecodeToDevice(*stream, shape, frames, [&](const NvdecDeviceFrame& f) {
        seen.push_back(f.index);
        EXPECT_EQ(f.picture, shape);
        EXPECT_GE(f.coded_width, shape.width);
        EXPECT_GE(f.coded_height, shape.height);
        for (int p = 0; p < 3; ++p) {
          EXPECT_NE(f.planes[p], 0u);
          EXPECT_GE(f.pitch[p], f.coded_width);
        }
        return Status::Ok();
      });
      ASSERT_TRUE(on_device.ok()) << on_device.ToString();
      EXPECT_EQ(seen.size(), frames);
      for (uint32_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
    }
  }
}

}  // namespace
}  // namespace kvc
