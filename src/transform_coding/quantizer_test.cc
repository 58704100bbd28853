#include "transform_coding/quantizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"

namespace kvc {
namespace {

// Random group values at a random magnitude between 1e-4 and 1e3.
std::vector<float> RandomGroup(uint32_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> log_scale(-4.0f, 3.0f);
  const float scale = std::pow(10.0f, log_scale(rng));
  std::vector<float> x(n);
  for (float& v : x) v = scale * normal(rng);
  return x;
}

float MaxAbs(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::abs(v));
  return m;
}

TEST(Quantizer, ErrorAtMostHalfAStepAndScaleNeverClips) {
  std::mt19937 rng(1);
  for (uint32_t bits = 1; bits <= 8; ++bits) {
    for (uint32_t n : {1u, 2u, 5u, 16u, 33u}) {
      for (int rep = 0; rep < 50; ++rep) {
        const std::vector<float> x = RandomGroup(n, rng);
        std::vector<uint8_t> codes(n);
        std::vector<float> back(n);
        uint16_t scale = 0;
        QuantizeGroup(x.data(), n, bits, codes.data(), &scale);
        DequantizeGroup(codes.data(), n, bits, scale, back.data());
        const float m = Fp16ToFp32(scale);
        // M is the smallest fp16 at or above max |x|.
        ASSERT_GE(m, MaxAbs(x));
        ASSERT_LT(Fp16ToFp32(static_cast<uint16_t>(scale - 1)), MaxAbs(x));
        const double step = 2.0 * m / (1u << bits);
        for (uint32_t i = 0; i < n; ++i) {
          ASSERT_LT(codes[i], 1u << bits);
          ASSERT_LE(std::abs(double{x[i]} - back[i]), step / 2 * (1 + 1e-6)) << bits << " bits, x=" << x[i];
          // Reconstructions are exact: -M + (code + 0.5) * step with nothing rounded.
          ASSERT_EQ(double{back[i]}, -double{m} + (codes[i] + 0.5) * step);
        }
      }
    }
  }
}

TEST(Quantizer, ZeroGroupIsExact) {
  for (uint32_t bits = 1; bits <= 8; ++bits) {
    const std::vector<float> x = {0.0f, -0.0f, 0.0f, 0.0f, -0.0f};
    std::vector<uint8_t> codes(x.size());
    std::vector<float> back(x.size(), 1.0f);
    uint16_t scale = 0xffff;
    QuantizeGroup(x.data(), 5, bits, codes.data(), &scale);
    EXPECT_EQ(scale, 0);
    for (uint8_t c : codes) EXPECT_EQ(c, 1u << (bits - 1));
    DequantizeGroup(codes.data(), 5, bits, scale, back.data());
    for (float v : back) {
      EXPECT_EQ(v, 0.0f);
      EXPECT_FALSE(std::signbit(v));
    }
  }
}

TEST(Quantizer, TinyAndHugeValues) {
  // Below fp16's smallest subnormal: the scale becomes that subnormal, not 0.
  const float tiny[2] = {1e-9f, -3e-9f};
  uint8_t codes[2];
  float back[2];
  uint16_t scale = 0;
  QuantizeGroup(tiny, 2, 4, codes, &scale);
  EXPECT_EQ(scale, 1);
  DequantizeGroup(codes, 2, 4, scale, back);
  const double step = 2.0 * Fp16ToFp32(1) / 16;
  for (int i = 0; i < 2; ++i) EXPECT_LE(std::abs(double{tiny[i]} - back[i]), step / 2);

  // Beyond fp16 range the scale saturates at 65504 and values clip; NaN takes code 0.
  const float huge[4] = {1e6f, -std::numeric_limits<float>::infinity(), 3.0f, std::numeric_limits<float>::quiet_NaN()};
  uint8_t hc[4];
  QuantizeGroup(huge, 4, 3, hc, &scale);
  EXPECT_EQ(scale, 0x7bff);
  EXPECT_EQ(hc[0], 7);
  EXPECT_EQ(hc[1], 0);
  EXPECT_EQ(hc[2], 4);
  EXPECT_EQ(hc[3], 0);
}

TEST(Quantizer, ExtremesReachTheOuterCells) {
  const float x[3] = {-2.0f, 2.0f, 0.5f};
  uint8_t codes[3];
  uint16_t scale;
  QuantizeGroup(x, 3, 2, codes, &scale);
  EXPECT_EQ(Fp16ToFp32(scale), 2.0f);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 3);  // x = M lands in the top cell, not past it
  EXPECT_EQ(codes[2], 2);  // (0.5 + 2) / 1 = 2.5
}

struct BlockCase {
  uint32_t n_tokens = 37;
  uint32_t n_coeffs = 45;
  uint32_t group_size = 16;
  std::vector<uint8_t> bits = {5, 0, 3};
};

std::vector<float> RandomCoeffs(const BlockCase& c, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t{c.n_tokens} * c.n_coeffs);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (10.0f / (1 + i % c.n_coeffs));
  for (uint32_t i = 0; i < c.n_coeffs; ++i) x[3 * c.n_coeffs + i] = 0.0f;  // one all-zero token
  return x;
}

TEST(Quantizer, BlockMatchesPerGroupFunctions) {
  const BlockCase bc;
  std::mt19937 rng(2);
  const std::vector<float> x = RandomCoeffs(bc, rng);
  QuantizedBlock q;
  QuantizeBlock(x.data(), bc.n_tokens, bc.n_coeffs, bc.group_size, bc.bits, &q);
  ASSERT_EQ(NumQuantGroups(bc.n_coeffs, bc.group_size), 3u);
  ASSERT_EQ(q.codes.size(), size_t{bc.n_tokens} * (16 + 13));
  ASSERT_EQ(q.scales.size(), size_t{bc.n_tokens} * 2);
  EXPECT_EQ(QuantizedCodeCount(bc.n_tokens, bc.n_coeffs, bc.group_size, bc.bits), q.codes.size());
  EXPECT_EQ(QuantizedScaleCount(bc.n_tokens, bc.bits), q.scales.size());

  std::vector<float> back(x.size(), 99.0f);
  ASSERT_TRUE(DequantizeBlock(q, bc.n_tokens, bc.n_coeffs, bc.group_size, bc.bits, back.data()).ok());

  // Group-major layout: group 0's codes for every token, then group 2's (group 1 is dropped).
  size_t code_at = 0, scale_at = 0;
  for (uint32_t g : {0u, 2u}) {
    const uint32_t c0 = g * bc.group_size;
    const uint32_t len = std::min(bc.group_size, bc.n_coeffs - c0);
    for (uint32_t t = 0; t < bc.n_tokens; ++t) {
      std::vector<uint8_t> codes(len);
      std::vector<float> rec(len);
      uint16_t scale;
      QuantizeGroup(x.data() + size_t{t} * bc.n_coeffs + c0, len, bc.bits[g], codes.data(), &scale);
      DequantizeGroup(codes.data(), len, bc.bits[g], scale, rec.data());
      ASSERT_EQ(q.scales[scale_at++], scale);
      for (uint32_t i = 0; i < len; ++i) {
        ASSERT_EQ(q.codes[code_at++], codes[i]);
        ASSERT_EQ(back[size_t{t} * bc.n_coeffs + c0 + i], rec[i]);
      }
    }
  }
  for (uint32_t t = 0; t < bc.n_tokens; ++t) {
    for (uint32_t i = 16; i < 32; ++i) ASSERT_EQ(back[size_t{t} * bc.n_coeffs + i], 0.0f);
  }
  for (uint32_t i = 0; i < bc.n_coeffs; ++i) ASSERT_EQ(back[size_t{3} * bc.n_coeffs + i], 0.0f);  // the zero token
}

TEST(Quantizer, EveryWidthRoundTripsThroughABlock) {
  std::mt19937 rng(3);
  for (uint32_t bits = 1; bits <= 8; ++bits) {
    BlockCase bc;
    bc.n_tokens = 9;
    bc.n_coeffs = 40;
    bc.bits = {static_cast<uint8_t>(bits), static_cast<uint8_t>(bits), static_cast<uint8_t>(bits)};
    const std::vector<float> x = RandomCoeffs(bc, rng);
    QuantizedBlock q;
    QuantizeBlock(x.data(), bc.n_tokens, bc.n_coeffs, bc.group_size, bc.bits, &q);
    std::vector<float> back(x.size());
    ASSERT_TRUE(DequantizeBlock(q, bc.n_tokens, bc.n_coeffs, bc.group_size, bc.bits, back.data()).ok());
    for (uint32_t t = 0; t < bc.n_tokens; ++t) {
      for (uint32_t c0 = 0; c0 < bc.n_coeffs; c0 += bc.group_size) {
        const uint32_t len = std::min(bc.group_size, bc.n_coeffs - c0);
        float m = 0;
        for (uint32_t i = 0; i < len; ++i) m = std::max(m, std::abs(x[t * bc.n_coeffs + c0 + i]));
        const double half_step = Fp16ToFp32(Fp32ToFp16(m) + 1) / (1u << bits);  // generous M bound
        for (uint32_t i = 0; i < len; ++i) {
          const size_t at = size_t{t} * bc.n_coeffs + c0 + i;
          ASSERT_LE(std::abs(double{x[at]} - back[at]), half_step) << bits;
        }
      }
    }
  }
}

TEST(Quantizer, EveryScaleDecodesLikeTheGroupFunction) {
  // The block decoder converts scales its own way; every valid fp16 scale (subnormals
  // included) and every code must come out as DequantizeGroup's.
  constexpr uint32_t kTokens = 0x7c00;
  constexpr uint32_t kLen = 19;  // one 16-wide chunk and a scalar tail
  for (uint32_t bits : {1u, 5u, 8u}) {
    const std::vector<uint8_t> widths = {static_cast<uint8_t>(bits)};
    QuantizedBlock q;
    q.codes.resize(size_t{kTokens} * kLen);
    q.scales.resize(kTokens);
    for (uint32_t t = 0; t < kTokens; ++t) {
      q.scales[t] = static_cast<uint16_t>(t);
      for (uint32_t i = 0; i < kLen; ++i) {
        q.codes[size_t{t} * kLen + i] = static_cast<uint8_t>((t + i * 37) % (1u << bits));
      }
    }
    std::vector<float> out(q.codes.size()), want(kLen);
    ASSERT_TRUE(DequantizeBlock(q, kTokens, kLen, 32, widths, out.data()).ok());
    for (uint32_t t = 0; t < kTokens; ++t) {
      DequantizeGroup(q.codes.data() + size_t{t} * kLen, kLen, bits, q.scales[t], want.data());
      for (uint32_t i = 0; i < kLen; ++i) ASSERT_EQ(out[size_t{t} * kLen + i], want[i]) << t << "," << i;
    }
  }
}

TEST(Quantizer, EmptyBlock) {
  const std::vector<uint8_t> bits = {4, 4};
  QuantizedBlock q;
  QuantizeBlock(nullptr, 0, 20, 16, bits, &q);
  EXPECT_TRUE(q.codes.empty());
  EXPECT_TRUE(q.scales.empty());
  EXPECT_TRUE(DequantizeBlock(q, 0, 20, 16, bits, nullptr).ok());
}

TEST(Quantizer, HostileBlocksFail) {
  const BlockCase bc;
  std::mt19937 rng(4);
  const std::vector<float> x = RandomCoeffs(bc, rng);
  QuantizedBlock good;
  QuantizeBlock(x.data(), bc.n_tokens, bc.n_coeffs, bc.group_size, bc.bits, &good);
  std::vector<float> out(x.size());
  auto decode = [&](const QuantizedBlock& q, std::span<const uint8_t> bits = {}, uint32_t group_size = 16) {
    return DequantizeBlock(q, bc.n_tokens, bc.n_coeffs, group_size, bits.empty() ? bc.bits : bits, out.data()).code();
  };
  ASSERT_EQ(decode(good), StatusCode::kOk);

  QuantizedBlock q = good;
  q.codes.pop_back();
  EXPECT_EQ(decode(q), StatusCode::kCorrupt);
  q = good;
  q.codes.push_back(0);
  EXPECT_EQ(decode(q), StatusCode::kCorrupt);
  q = good;
  q.scales.pop_back();
  EXPECT_EQ(decode(q), StatusCode::kCorrupt);
  q = good;
  q.scales.push_back(0);
  EXPECT_EQ(decode(q), StatusCode::kCorrupt);
  for (uint16_t bad : {uint16_t{0x7c00}, uint16_t{0x7e00}, uint16_t{0xfc00}, uint16_t{0x8000}, uint16_t{0xbc00}}) {
    q = good;
    q.scales[q.scales.size() - 5] = bad;
    EXPECT_EQ(decode(q), StatusCode::kCorrupt) << bad;
  }
  q = good;
  q.codes[7] = 1 << 5;  // group 0 has 5 bits
  EXPECT_EQ(decode(q), StatusCode::kCorrupt);
  q = good;
  q.codes.back() = 1 << 3;  // group 2 has 3 bits
  EXPECT_EQ(decode(q), StatusCode::kCorrupt);

  // An allocation that does not fit the shape is the caller's error.
  const std::vector<uint8_t> two = {5, 3};
  const std::vector<uint8_t> nine = {5, 0, 9};
  EXPECT_EQ(decode(good, two), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode(good, nine), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode(good, {}, 0), StatusCode::kInvalidArgument);
}

TEST(Quantizer, MeasureGroupErrorsMatchesExplicitComputation) {
  const BlockCase bc;
  std::mt19937 rng(5);
  const std::vector<float> x = RandomCoeffs(bc, rng);
  const auto errors = MeasureGroupErrors(x.data(), bc.n_tokens, bc.n_coeffs, bc.group_size);
  ASSERT_EQ(errors.size(), 3u);
  for (uint32_t g = 0; g < 3; ++g) {
    const uint32_t c0 = g * bc.group_size;
    const uint32_t len = std::min(bc.group_size, bc.n_coeffs - c0);
    for (uint32_t b = 0; b <= 8; ++b) {
      double want = 0;
      for (uint32_t t = 0; t < bc.n_tokens; ++t) {
        const float* row = x.data() + size_t{t} * bc.n_coeffs + c0;
        std::vector<uint8_t> codes(len);
        std::vector<float> rec(len, 0.0f);
        if (b > 0) {
          uint16_t scale;
          QuantizeGroup(row, len, b, codes.data(), &scale);
          DequantizeGroup(codes.data(), len, b, scale, rec.data());
        }
        for (uint32_t i = 0; i < len; ++i) want += (double{row[i]} - rec[i]) * (double{row[i]} - rec[i]);
      }
      want /= bc.n_tokens;
      EXPECT_NEAR(errors[g][b], want, 1e-12 * want) << "group " << g << " bits " << b;
    }
  }
  EXPECT_TRUE(MeasureGroupErrors(x.data(), bc.n_tokens, bc.n_coeffs, 0).empty());
  for (const auto& e : MeasureGroupErrors(x.data(), 0, bc.n_coeffs, bc.group_size)) {
    for (double v : e) EXPECT_EQ(v, 0.0);
  }
}

TEST(Quantizer, ErrorDecreasesWithWidth) {
  BlockCase bc;
  bc.n_tokens = 500;
  bc.n_coeffs = 64;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  std::vector<float> iid(size_t{bc.n_tokens} * bc.n_coeffs);
  for (float& v : iid) v = normal(rng);
  for (const auto& e : MeasureGroupErrors(iid.data(), bc.n_tokens, bc.n_coeffs, bc.group_size)) {
    for (int b = 1; b <= 8; ++b) EXPECT_LT(e[b], e[b - 1]) << b;
  }
  // Variances falling within a group, as PCA coefficients' do: every width still beats the
  // next narrower one, but 1 bit can be worse than dropping the group (the small components
  // are reconstructed at +-M/2) — the DP sees that and drops such groups instead.
  const std::vector<float> x = RandomCoeffs(bc, rng);
  for (const auto& e : MeasureGroupErrors(x.data(), bc.n_tokens, bc.n_coeffs, bc.group_size)) {
    for (int b = 2; b <= 8; ++b) {
      EXPECT_LT(e[b], e[b - 1]) << b;
      // Each extra bit cuts the error roughly fourfold once the cells are fine.
      if (b >= 4) {
        EXPECT_NEAR(e[b] / e[b - 1], 0.25, 0.05) << b;
      }
    }
  }
}

}  // namespace
}  // namespace kvc
