#include "codecs/video/video_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "base/half.h"

namespace kvc {
namespace {

// Every value has its own pixel, inside its stream, for shapes with odd counts everywhere.
TEST(LayoutGeometry, EveryValueHasItsOwnPixel) {
  // The last three: MLA's one 576-wide latent "head" and the indexers' one or two 128-wide heads.
  const KvShape shapes[] = {{1, 1, 1, 1},   {5, 3, 6, 9},         {4, 2, 64, 17},       {3, 1, 7, 2},
                            {7, 5, 128, 3}, {4, 1, 576, 3, true}, {2, 1, 128, 5, true}, {4, 2, 128, 3, true}};
  for (const KvShape& shape : shapes) {
    for (VideoLayout layout : {VideoLayout::kTokenFrames, VideoLayout::kTokenAxis}) {
      for (bool planes : {false, true}) {
        const LayoutGeometry g(shape, {layout, planes});
        std::set<std::pair<uint32_t, uint64_t>> seen;
        for (uint32_t l = 0; l < shape.n_layers; ++l) {
          const LayoutGeometry::LayerPlaces places = g.PlaceLayer(l);
          ASSERT_EQ(places.position_offsets.size(), shape.row_elems());
          for (uint32_t t = 0; t < shape.n_tokens; ++t) {
            for (uint32_t p = 0; p < shape.row_elems(); ++p) {
              const auto place = g.Locate(l, t, p);
              // The layer's places, computed at once, are the same ones.
              ASSERT_EQ(places.stream, place.stream);
              ASSERT_EQ(places.base + t * places.token_stride + places.position_offsets[p], place.offset);
              ASSERT_LT(place.stream, g.streams().size());
              ASSERT_LT(place.offset, g.streams()[place.stream].bytes());
              ASSERT_TRUE(seen.insert({place.stream, place.offset}).second)
                  << VideoLayoutName(layout) << " planes " << planes << " layer " << l << " token " << t;
            }
          }
        }
        for (const auto& s : g.streams()) EXPECT_EQ(s.picture.planes, planes ? 3u : 1u);
      }
    }
  }
}

TEST(LayoutGeometry, PicturesFollowTheLayout) {
  const KvShape shape{.n_layers = 6, .n_kv_heads = 2, .head_dim = 64, .n_tokens = 256};
  const LayoutGeometry frames(shape, {VideoLayout::kTokenFrames, true});
  ASSERT_EQ(frames.streams().size(), 2u);                            // two groups of three layers
  EXPECT_EQ(frames.streams()[0].picture, (PictureShape{16, 8, 3}));  // two 8x8 head tiles
  EXPECT_EQ(frames.streams()[0].n_frames, 256u);
  const LayoutGeometry axis(shape, {VideoLayout::kTokenAxis, false});
  ASSERT_EQ(axis.streams().size(), 1u);
  EXPECT_EQ(axis.streams()[0].picture, (PictureShape{256, 128, 1}));
  EXPECT_EQ(axis.streams()[0].n_frames, 6u);
}

// MLA's 576 channels: a 32-wide tile (576 is no square) 18 high, one per frame; the axis layout's
// pictures are 576 high. Keys-only changes nothing here: a geometry is one kind's.
TEST(LayoutGeometry, MlaPictures) {
  const KvShape shape{.n_layers = 5, .n_kv_heads = 1, .head_dim = 576, .n_tokens = 40, .keys_only = true};
  const LayoutGeometry frames(shape, {VideoLayout::kTokenFrames, true});
  ASSERT_EQ(frames.streams().size(), 2u);  // layers 0-2 and 3-4
  EXPECT_EQ(frames.streams()[0].picture, (PictureShape{32, 18, 3}));
  EXPECT_EQ(frames.streams()[0].n_frames, 40u);
  const LayoutGeometry axis(shape, {VideoLayout::kTokenAxis, false});
  ASSERT_EQ(axis.streams().size(), 1u);
  EXPECT_EQ(axis.streams()[0].picture, (PictureShape{40, 576, 1}));
  EXPECT_EQ(axis.streams()[0].n_frames, 5u);
  const LayoutGeometry heads(KvShape{2, 2, 128, 7, true}, {VideoLayout::kTokenFrames, false});
  EXPECT_EQ(heads.streams()[0].picture, (PictureShape{32, 8, 1}));  // two 16x8 head tiles side by side
}

TEST(OrderChannels, ChainsSimilarChannels) {
  // Channels 0..7: c and c + 4 hold the same sequence, so the chain must pair them.
  const uint32_t tokens = 50;
  const uint32_t channels = 8;
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(tokens * channels);
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t c = 0; c < 4; ++c) {
      const auto v = static_cast<uint8_t>(rng());
      codes[t * channels + c] = v;
      codes[t * channels + c + 4] = v;
    }
  }
  const auto order = OrderChannels(codes.data(), tokens, channels);
  ASSERT_TRUE(IsPermutation(order, channels));
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(order[1], 4);
  for (size_t p = 0; p < order.size(); p += 2) EXPECT_EQ(order[p] % 4, order[p + 1] % 4) << "position " << p;
}

TEST(OrderTokens, ChainsSimilarTokens) {
  // Tokens 2k and 2k+1 are near copies (one code apart), far from every other pair.
  const uint32_t tokens = 10;
  const uint32_t channels = 6;
  std::vector<uint8_t> codes(tokens * channels);
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t c = 0; c < channels; ++c) codes[t * channels + c] = static_cast<uint8_t>(40 * (t / 2) + c + (t % 2));
  }
  const auto order = OrderTokens(codes.data(), tokens, channels);
  ASSERT_TRUE(IsPermutation(order, tokens));
  for (size_t p = 0; p < order.size(); p += 2) EXPECT_EQ(order[p] / 2, order[p + 1] / 2) << "position " << p;
}

TEST(CentreChannels, RoundTripsWithWrapAround) {
  for (uint32_t bits : {8u, 6u, 4u}) {
    const uint32_t tokens = 9;
    const uint32_t channels = 5;
    std::vector<uint8_t> codes(tokens * channels);
    std::mt19937 rng(bits);
    for (uint8_t& v : codes) v = static_cast<uint8_t>(rng() % (1u << bits));
    const auto original = codes;
    const auto centres = CentreChannels(codes.data(), tokens, channels, bits);
    for (uint8_t v : codes) EXPECT_LT(v, 1u << bits);
    UncentreChannels(codes.data(), tokens, channels, bits, centres);
    EXPECT_EQ(codes, original) << bits << " bits";
  }
}

TEST(OrderChannels, PermutationCheck) {
  const std::vector<uint32_t> ok = {2, 0, 1};
  const std::vector<uint32_t> repeated = {0, 0, 1};
  const std::vector<uint32_t> out_of_range = {0, 1, 3};
  EXPECT_TRUE(IsPermutation(ok, 3));
  EXPECT_FALSE(IsPermutation(repeated, 3));
  EXPECT_FALSE(IsPermutation(out_of_range, 3));
  EXPECT_FALSE(IsPermutation(ok, 4));
}

TEST(Quantiser, ErrorWithinHalfAStep) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const uint32_t tokens = 37;
  const uint32_t channels = 12;
  std::vector<float> x(tokens * channels);
  for (float& v : x) v = normal(rng);
  for (uint32_t bits : {8u, 6u, 4u}) {
    for (uint32_t group : {1u, 5u, 12u, 100u}) {
      std::vector<GroupScale> scales;
      std::vector<uint8_t> codes(x.size());
      QuantiseLayer(x.data(), tokens, channels, group, bits, &scales, codes.data());
      ASSERT_EQ(scales.size(), (channels + group - 1) / group);
      std::vector<float> back(x.size());
      DequantiseLayer(codes.data(), tokens, channels, group, scales, back.data());
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_LT(codes[i], 1u << bits);
        const float step = Fp16ToFp32(scales[(i % channels) / group].scale_fp16);
        EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * step + 1e-5f) << "bits " << bits << " group " << group;
      }
    }
  }
}

TEST(NeighbourDifferenceRatio, SmoothAndIndependentTokens) {
  const uint32_t tokens = 4000;
  std::vector<float> ramp(tokens);
  for (uint32_t t = 0; t < tokens; ++t) ramp[t] = 0.01f * t;
  EXPECT_NEAR(NeighbourDifferenceRatio(ramp.data(), tokens, 1), 0.0, 1e-6);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> noise(tokens);
  for (float& v : noise) v = normal(rng);
  EXPECT_NEAR(NeighbourDifferenceRatio(noise.data(), tokens, 1), 2.0, 0.15);
}

}  // namespace
}  // namespace kvc
