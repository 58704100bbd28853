#include "tensor/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"

namespace kvc {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class RopeTest : public ::testing::TestWithParam<RopeType> {};

TEST_P(RopeTest, UndoInvertsApply) {
  RopeParams p;
  p.type = GetParam();
  const uint32_t tokens = 7, heads = 3, dim = 64;
  const auto original = Random(tokens * heads * dim, 1);
  auto x = original;
  RotateRows(p, x.data(), tokens, heads, dim, 4000, false);
  RotateRows(p, x.data(), tokens, heads, dim, 4000, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], original[i], 2e-4f);
}

// What makes it RoPE: a query at position m and a key at position n give a dot product that
// depends only on m - n.
TEST_P(RopeTest, DotProductDependsOnRelativePositionOnly) {
  RopeParams p;
  p.type = GetParam();
  const uint32_t dim = 64;
  const auto q0 = Random(dim, 2), k0 = Random(dim, 3);
  auto dot_at = [&](int32_t m, int32_t n) {
    auto q = q0, k = k0;
    RotateRows(p, q.data(), 1, 1, dim, m, false);
    RotateRows(p, k.data(), 1, 1, dim, n, false);
    double s = 0;
    for (uint32_t i = 0; i < dim; ++i) s += static_cast<double>(q[i]) * k[i];
    return s;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(110, 103), 1e-3);
  EXPECT_GT(std::fabs(dot_at(10, 3) - dot_at(10, 9)), 1e-3);
}

TEST_P(RopeTest, PartialRotationLeavesTheRestAlone) {
  RopeParams p;
  p.type = GetParam();
  p.n_rot = 32;
  const auto original = Random(64, 4);
  auto x = original;
  RotateRows(p, x.data(), 1, 1, 64, 17, false);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(x[i], original[i]);
  bool changed = false;
  for (int i = 0; i < 32; ++i) changed |= x[i] != original[i];
  EXPECT_TRUE(changed);
}

INSTANTIATE_TEST_SUITE_P(Types, RopeTest, ::testing::Values(RopeType::kNormal, RopeType::kNeox));

TEST(Rope, NormalPairsAdjacentNeoxPairsHalves) {
  RopeParams normal, neox;
  neox.type = RopeType::kNeox;
  std::vector<float> a(8, 0.0f), b(8, 0.0f);
  a[0] = b[0] = 1.0f;  // rotating channel 0 moves energy into its partner only
  RotateRows(normal, a.data(), 1, 1, 8, 1, false);
  RotateRows(neox, b.data(), 1, 1, 8, 1, false);
  EXPECT_NEAR(a[1], std::sin(1.0f), 1e-6);
  EXPECT_NEAR(b[4], std::sin(1.0f), 1e-6);
  EXPECT_EQ(a[4], 0.0f);
  EXPECT_EQ(b[1], 0.0f);
}

// Keys of these kinds are cached as the model left them (no RoPE, or a vision encoder's 2-D RoPE
// kvcodec does not undo), so every entry point leaves them bit for bit alone: rotating them by a
// plain RoPE would corrupt what the model attends with.
TEST(Rope, KindsKvcodecDoesNotRotateAreTheIdentity) {
  const uint32_t tokens = 5, heads = 2, dim = 64;
  const auto original = Random(size_t{tokens} * heads * dim, 9);
  std::vector<uint16_t> want(original.size());
  Fp32ToFp16Clamped(original.data(), want.data(), original.size());
  for (RopeType type : {RopeType::kNone, RopeType::kVision}) {
    SCOPED_TRACE(RopeTypeName(type));
    EXPECT_FALSE(RopeRotatesKeys(type));
    const RopeParams p{.type = type, .n_rot = 32, .freq_base = 10000.0f, .freq_scale = 1.0f};
    for (bool inverse : {false, true}) {
      auto x = original;
      RotateRows(p, x.data(), tokens, heads, dim, 300, inverse);
      EXPECT_EQ(0, std::memcmp(x.data(), original.data(), x.size() * sizeof(float)));
      const RopeTable table(p, dim, 300, tokens);
      table.Rotate(x.data(), heads, inverse);
      table.RotateTokens(x.data() + heads * dim, 1, tokens - 1, heads, inverse);
      EXPECT_EQ(0, std::memcmp(x.data(), original.data(), x.size() * sizeof(float)));
      for (VectorIsa isa : SupportedVectorIsas()) {
        std::vector<uint16_t> got(original.size());
        table.RotateTokensToFp16(original.data(), 0, tokens, heads, inverse, got.data(), isa);
        EXPECT_EQ(got, want) << VectorIsaName(isa);
      }
    }
  }
  EXPECT_TRUE(RopeRotatesKeys(RopeType::kNormal));
  EXPECT_TRUE(RopeRotatesKeys(RopeType::kNeox));
}

// Sectioned RoPE on text positions is NeoX's rotation (rope.h; checked against llama.cpp's
// models in src/llama/rope_kinds_test.cc), so every entry point rotates it exactly as NeoX.
TEST(Rope, SectionedKindsRotateAsNeox) {
  const uint32_t tokens = 5, heads = 2, dim = 64;
  const auto original = Random(size_t{tokens} * heads * dim, 11);
  const RopeParams neox{.type = RopeType::kNeox, .n_rot = 32, .freq_base = 10000.0f, .freq_scale = 1.0f};
  for (RopeType type : {RopeType::kMrope, RopeType::kImrope}) {
    SCOPED_TRACE(RopeTypeName(type));
    EXPECT_TRUE(RopeRotatesKeys(type));
    RopeParams p = neox;
    p.type = type;
    for (bool inverse : {false, true}) {
      auto want = original, got = original;
      RotateRows(neox, want.data(), tokens, heads, dim, 300, inverse);
      RotateRows(p, got.data(), tokens, heads, dim, 300, inverse);
      EXPECT_EQ(got, want);
      EXPECT_NE(got, original);
      auto table_got = original;
      const RopeTable table(p, dim, 300, tokens);
      table.Rotate(table_got.data(), heads, inverse);
      auto table_want = original;
      const RopeTable neox_table(neox, dim, 300, tokens);
      neox_table.Rotate(table_want.data(), heads, inverse);
      EXPECT_EQ(table_got, table_want);
    }
  }
}

TEST(Rope, TypeNamesRoundTrip) {
  for (uint8_t t = 0; t <= static_cast<uint8_t>(kLastRopeType); ++t) {
    const auto type = static_cast<RopeType>(t);
    EXPECT_EQ(ParseRopeType(RopeTypeName(type)), type) << RopeTypeName(type);
  }
  EXPECT_STREQ(RopeTypeName(RopeType::kNone), "none");
  EXPECT_STREQ(RopeTypeName(RopeType::kMrope), "mrope");
  EXPECT_STREQ(RopeTypeName(static_cast<RopeType>(6)), "unknown");
  EXPECT_EQ(ParseRopeType("unknown"), std::nullopt);
  EXPECT_EQ(ParseRopeType("NEOX"), std::nullopt);
  EXPECT_EQ(ParseRopeType(""), std::nullopt);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Every path (AVX, SSE, scalar tail) rounds as x0 * c + x1 * -s and x1 * c + x0 * s, one rounding
// per operation, so a plain scalar loop over the same angles gives the same bits: at head sizes
// whose pairs reach each path, forwards and backwards.
TEST(RopeTable, NormalPairsMatchAScalarLoopBitForBit) {
  const int32_t pos_begin = 7;
  const uint32_t tokens = 3, heads = 2;
  for (uint32_t dim : {2u, 4u, 6u, 8u, 10u, 14u, 18u, 64u, 66u}) {
    RopeParams p;
    p.type = RopeType::kNormal;
    const uint32_t half = dim / 2;
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(dim));
    for (bool inverse : {false, true}) {
      std::vector<float> x = Random(size_t{tokens} * heads * dim, dim), want = x;
      const float sign = inverse ? -1.0f : 1.0f;
      for (uint32_t t = 0; t < tokens; ++t) {
        float theta = static_cast<float>(pos_begin + static_cast<int32_t>(t)) * p.freq_scale;
        for (uint32_t i = 0; i < half; ++i, theta *= theta_scale) {
          const float c = std::cos(theta), si = sign * std::sin(theta);
          for (uint32_t h = 0; h < heads; ++h) {
            float* v = want.data() + (size_t{t} * heads + h) * dim + 2 * i;
            const float x0 = v[0], x1 = v[1];
            v[0] = x0 * c + x1 * -si;
            v[1] = x1 * c + x0 * si;
          }
        }
      }
      RopeTable(p, dim, pos_begin, tokens).Rotate(x.data(), heads, inverse);
      for (size_t k = 0; k < x.size(); ++k)
        ASSERT_EQ(x[k], want[k]) << "dim " << dim << " inverse " << inverse << " at " << k;
    }
  }
}

TEST(RopeTable, MatchesRotateRows) {
  for (RopeType type : {RopeType::kNormal, RopeType::kNeox}) {
    RopeParams p;
    p.type = type;
    const uint32_t tokens = 5, heads = 2, dim = 64;
    std::vector<float> a(tokens * heads * dim);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
    auto b = a;
    RotateRows(p, a.data(), tokens, heads, dim, 300, true);
    RopeTable(p, dim, 300, tokens).Rotate(b.data(), heads, true);
    EXPECT_EQ(a, b);
  }
}

// The table's angles come from a cache of aligned position blocks: ranges that start mid-block,
// span several blocks, start below 0, or rotate only some channels, and any sub-range rotated
// with RotateTokens, must match RotateRows bit for bit.
TEST(RopeTable, CachedBlocksMatchRotateRowsEverywhere) {
  const uint32_t heads = 3, dim = 32;
  for (RopeType type : {RopeType::kNormal, RopeType::kNeox}) {
    for (uint32_t n_rot : {0u, 16u}) {
      for (float freq_scale : {1.0f, 0.25f}) {
        RopeParams p;
        p.type = type;
        p.n_rot = n_rot;
        p.freq_scale = freq_scale;
        for (auto [pos, tokens] : {std::pair{0, 256u}, std::pair{200, 600u}, std::pair{-300, 400u},
                                   std::pair{123457, 3u}, std::pair{255, 2u}}) {
          std::vector<float> a(size_t{tokens} * heads * dim);
          for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
          auto b = a, c = a;
          RotateRows(p, a.data(), tokens, heads, dim, pos, false);
          const RopeTable table(p, dim, pos, tokens);
          table.Rotate(b.data(), heads, false);
          EXPECT_EQ(a, b) << pos << " " << tokens;
          // In uneven pieces, as a decoder rotating a few tokens at a time would.
          for (uint32_t t = 0; t < tokens; t += 37) {
            const uint32_t count = std::min(37u, tokens - t);
            table.RotateTokens(c.data() + size_t{t} * heads * dim, t, count, heads, false);
          }
          EXPECT_EQ(a, c) << pos << " " << tokens;
        }
      }
    }
  }
}

// The fused pass stores the bits of RotateTokens then Fp32ToFp16Clamped on every path this CPU
// runs: head sizes whose pairs end on each vector width and the scalar tail, partial rotation,
// both pair layouts and directions, sub-ranges that start mid-table, and values past fp16's range.
TEST(RopeTable, RotateTokensToFp16MatchesRotateThenConvert) {
  const int32_t pos_begin = 250;
  const uint32_t tokens = 9, heads = 3;
  for (RopeType type : {RopeType::kNormal, RopeType::kNeox}) {
    for (uint32_t dim : {2u, 6u, 16u, 18u, 32u, 34u, 64u, 96u, 128u}) {
      for (uint32_t n_rot : {0u, dim / 2, 1u}) {
        RopeParams p;
        p.type = type;
        p.n_rot = n_rot;
        const RopeTable table(p, dim, pos_begin, tokens);
        std::vector<float> x = Random(size_t{tokens} * heads * dim, dim + n_rot);
        for (size_t i = 0; i < x.size(); i += 7) x[i] *= 70000.0f;  // some rotate past 65504
        x[3] = std::numeric_limits<float>::quiet_NaN();
        for (bool inverse : {false, true}) {
          for (uint32_t first : {0u, 4u}) {
            const uint32_t count = tokens - first;
            const float* const from = x.data() + size_t{first} * heads * dim;
            std::vector<float> rotated(from, from + size_t{count} * heads * dim);
            table.RotateTokens(rotated.data(), first, count, heads, inverse);
            std::vector<uint16_t> want(rotated.size());
            Fp32ToFp16Clamped(rotated.data(), want.data(), rotated.size());
            for (VectorIsa isa : SupportedVectorIsas()) {
              const std::vector<float> before = x;
              std::vector<uint16_t> got(rotated.size());
              table.RotateTokensToFp16(from, first, count, heads, inverse, got.data(), isa);
              ASSERT_EQ(got, want) << VectorIsaName(isa) << " type " << static_cast<int>(type) << " dim " << dim
                                   << " n_rot " << n_rot << " inverse " << inverse << " first " << first;
              ASSERT_EQ(0, std::memcmp(before.data(), x.data(), x.size() * sizeof(float)));  // rows untouched
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvc
