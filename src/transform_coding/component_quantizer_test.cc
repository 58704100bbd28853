#include "transform_coding/component_quantizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/half.h"

namespace kvc {
namespace {

// Mean squared error of the mid-rise uniform quantiser with `levels` levels and step `step` on
// a unit Gaussian, by numerical integration.
double GaussianMse(uint32_t levels, double step) {
  double mse = 0;
  const double dx = 1e-3;
  for (double x = -9.0; x < 9.0; x += dx) {
    const double c = x + dx / 2;
    double code = std::floor(c / step) + levels / 2.0;
    code = std::clamp(code, 0.0, levels - 1.0);
    const double rec = (code - levels / 2.0 + 0.5) * step;
    mse += (c - rec) * (c - rec) * std::exp(-c * c / 2) / std::sqrt(2 * M_PI) * dx;
  }
  return mse;
}

TEST(ComponentQuantizer, GaussianStepsAreTheNumericalOptimum) {
  for (uint32_t b = 1; b <= 8; ++b) {
    const double table = GaussianStep(b);
    // Golden-section search of the MSE over the step.
    double lo = table * 0.5, hi = table * 2.0;
    for (int i = 0; i < 60; ++i) {
      const double a = lo + (hi - lo) * 0.382, c = lo + (hi - lo) * 0.618;
      if (GaussianMse(1u << b, a) < GaussianMse(1u << b, c)) {
        hi = c;
      } else {
        lo = a;
      }
    }
    const double best = (lo + hi) / 2;
    EXPECT_NEAR(table, best, 0.01 * best) << b << " bits";
    // The MSE is flat near the optimum: what matters is that the table's MSE is the optimum's.
    EXPECT_LE(GaussianMse(1u << b, table), GaussianMse(1u << b, best) * 1.001) << b << " bits";
  }
  EXPECT_EQ(GaussianStep(0), 0.0f);
  EXPECT_EQ(GaussianStep(9), 0.0f);
}

std::vector<float> GaussianBlock(uint32_t n_tokens, uint32_t n_coeffs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t{n_tokens} * n_coeffs);
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t c = 0; c < n_coeffs; ++c) x[size_t{c} * n_tokens + t] = normal(rng) * 10.0f / (1.0f + c);
  return x;
}

// The codes are the documented clamp(floor(x / step) + L/2, 0, L - 1) for every value, level
// boundaries and far outliers included.
TEST(ComponentQuantizer, CodesFollowTheDocumentedFormula) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const uint16_t scale = Fp32ToFp16(0.75f);
  for (uint32_t bits = 1; bits <= 8; ++bits) {
    const float m = 1.25f;
    const float step = Fp16ToFp32(scale) * GaussianStep(bits) * m;
    std::vector<float> x;
    for (int i = 0; i < 2000; ++i) x.push_back(normal(rng) * 2.0f);
    for (int k = -300; k <= 300; ++k) {  // exactly on and next to every boundary
      const float edge = static_cast<float>(k) * step;
      x.insert(x.end(), {edge, std::nextafter(edge, -1e30f), std::nextafter(edge, 1e30f)});
    }
    x.insert(x.end(), {0.0f, -0.0f, 1e30f, -1e30f, 3e38f, -3e38f, 1e-30f, -1e-30f});
    std::vector<uint8_t> codes(x.size());
    QuantizeComponent(x.data(), 1, static_cast<uint32_t>(x.size()), bits, scale, m, codes.data());
    const float inv = 1.0f / step;
    const double half = 1u << (bits - 1), top = (1u << bits) - 1;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::clamp(std::floor(double{x[i] * inv}) + half, 0.0, top);
      ASSERT_EQ(codes[i], static_cast<uint8_t>(want)) << bits << " bits, x = " << x[i];
    }
  }
}

TEST(ComponentQuantizer, BlockRoundTripHasTheGaussianError) {
  const uint32_t n = 4096, d = 8;
  const std::vector<float> x = GaussianBlock(n, d, 1);
  const std::vector<uint8_t> bits = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> ones(8 * d, 1.0f);
  QuantizedBlock q;
  QuantizeComponentBlock(x.data(), n, d, bits, ones, &q);
  ASSERT_EQ(q.codes.size(), size_t{n} * d);
  ASSERT_EQ(q.scales.size(), d);
  std::vector<float> y(x.size());
  ASSERT_TRUE(DequantizeComponentBlock(q, n, d, bits, ones, y.data()).ok());
  for (uint32_t c = 0; c < d; ++c) {
    double err = 0, energy = 0;
    for (uint32_t t = 0; t < n; ++t) {
      const double v = x[size_t{c} * n + t];
      err += (v - y[size_t{c} * n + t]) * (v - y[size_t{c} * n + t]);
      energy += v * v;
    }
    const double expected = GaussianMse(1u << bits[c], GaussianStep(bits[c]));
    // Within 30%: at 6+ bits one sample past the clip point of 4096 moves the error that much.
    EXPECT_NEAR(err / energy, expected, 0.3 * expected) << "component " << c << " at " << int(bits[c]) << " bits";
  }
}

TEST(ComponentQuantizer, ZeroWidthsAndZeroComponentsDecodeToZero) {
  const uint32_t n = 64, d = 4;
  std::vector<float> x = GaussianBlock(n, d, 2);
  for (uint32_t t = 0; t < n; ++t) x[size_t{2} * n + t] = 0.0f;  // an all-zero component
  const std::vector<uint8_t> bits = {3, 0, 4, 0};
  const std::vector<float> ones(8 * d, 1.0f);
  QuantizedBlock q;
  QuantizeComponentBlock(x.data(), n, d, bits, ones, &q);
  EXPECT_EQ(q.scales.size(), 2u);
  std::vector<float> y(x.size(), 7.0f);
  ASSERT_TRUE(DequantizeComponentBlock(q, n, d, bits, ones, y.data()).ok());
  for (uint32_t t = 0; t < n; ++t) {
    EXPECT_EQ(y[size_t{1} * n + t], 0.0f);
    EXPECT_EQ(y[size_t{3} * n + t], 0.0f);
  }
  const std::vector<uint8_t> bits_zero = {0, 0, 5, 0};
  QuantizeComponentBlock(x.data(), n, d, bits_zero, ones, &q);
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_EQ(q.scales[0], 0u);
  ASSERT_TRUE(DequantizeComponentBlock(q, n, d, bits_zero, ones, y.data()).ok());
  for (uint32_t t = 0; t < n; ++t) EXPECT_EQ(std::signbit(y[size_t{2} * n + t]) ? 1 : 0, 0) << t;
}

TEST(ComponentQuantizer, HostileBlocksAreRejected) {
  const uint32_t n = 32, d = 2;
  const std::vector<float> x = GaussianBlock(n, d, 3);
  const std::vector<uint8_t> bits = {3, 2};
  const std::vector<float> ones(8 * d, 1.0f);
  QuantizedBlock good;
  QuantizeComponentBlock(x.data(), n, d, bits, ones, &good);
  std::vector<float> y(x.size());
  for (uint16_t bad : {uint16_t{0x7c00}, uint16_t{0x7e00}, uint16_t{0x8001}, uint16_t{0xffff}}) {
    QuantizedBlock q = good;
    q.scales[1] = bad;
    EXPECT_EQ(DequantizeComponentBlock(q, n, d, bits, ones, y.data()).code(), StatusCode::kCorrupt) << bad;
  }
  QuantizedBlock wide = good;
  wide.codes[n + 5] = 4;  // component 1 has 2 bits
  EXPECT_EQ(DequantizeComponentBlock(wide, n, d, bits, ones, y.data()).code(), StatusCode::kCorrupt);
  QuantizedBlock short_codes = good;
  short_codes.codes.pop_back();
  EXPECT_EQ(DequantizeComponentBlock(short_codes, n, d, bits, ones, y.data()).code(), StatusCode::kCorrupt);
  QuantizedBlock extra_scale = good;
  extra_scale.scales.push_back(0);
  EXPECT_EQ(DequantizeComponentBlock(extra_scale, n, d, bits, ones, y.data()).code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> too_wide = {9, 2};
  EXPECT_EQ(DequantizeComponentBlock(good, n, d, too_wide, ones, y.data()).code(), StatusCode::kInvalidArgument);
  const std::vector<float> few(3, 1.0f);
  EXPECT_EQ(DequantizeComponentBlock(good, n, d, bits, few, y.data()).code(), StatusCode::kInvalidArgument);
}

TEST(ComponentQuantizer, MeasureMatchesTheCodecAndPicksNearOneOnGaussians) {
  const uint32_t n = 2048, chunk = 256;
  const std::vector<float> x = GaussianBlock(n, 1, 4);
  const ComponentStats stats = MeasureComponent(x.data(), 1, n, chunk);
  double energy = 0;
  for (float v : x) energy += double{v} * v;
  EXPECT_NEAR(stats.error[0], energy / n, 1e-9 * energy);
  for (uint32_t b = 1; b <= 8; ++b) {
    // On Gaussian data the Gaussian step is right: the chosen multiplier is within a grid step or two of 1.
    EXPECT_GE(stats.multipliers[b - 1], 0.83f) << b;
    EXPECT_LE(stats.multipliers[b - 1], 1.2f) << b;
    EXPECT_LE(stats.entropy_bits[b], b + 1e-9) << b;
    EXPECT_GT(stats.entropy_bits[b], b - 1.0) << b;
    EXPECT_LT(stats.error[b], stats.error[b - 1]) << b;
    // The error it reports is what the block quantiser gives chunk by chunk with that multiplier.
    double err = 0;
    std::vector<float> m(8, 1.0f);
    m[b - 1] = stats.multipliers[b - 1];
    const std::vector<uint8_t> bits = {static_cast<uint8_t>(b)};
    for (uint32_t t0 = 0; t0 < n; t0 += chunk) {
      QuantizedBlock q;
      QuantizeComponentBlock(x.data() + t0, chunk, 1, bits, m, &q);
      std::vector<float> y(chunk);
      ASSERT_TRUE(DequantizeComponentBlock(q, chunk, 1, bits, m, y.data()).ok());
      for (uint32_t t = 0; t < chunk; ++t) err += (double{x[t0 + t]} - y[t]) * (double{x[t0 + t]} - y[t]);
    }
    EXPECT_NEAR(stats.error[b], err / n, 1e-6 * err / n) << b;
  }
}

TEST(ComponentQuantizer, HeavyTailsGetAWiderStepAtHighWidths) {
  // Laplacian coefficients: at 6+ bits the Gaussian step clips the tails, so a wider one wins.
  std::mt19937 rng(5);
  std::exponential_distribution<float> expo(1.0f);
  std::vector<float> x(4096);
  for (float& v : x) v = (rng() & 1 ? 1.0f : -1.0f) * expo(rng);
  const ComponentStats stats = MeasureComponent(x.data(), 1, static_cast<uint32_t>(x.size()), 512);
  EXPECT_GT(stats.multipliers[5], 1.0f);
  EXPECT_GT(stats.multipliers[6], 1.0f);
}

}  // namespace
}  // namespace kvc
