#include "base/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

namespace kvc {
namespace {

TEST(Half, EveryFp16RoundTripsThroughFp32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(f))));
      continue;
    }
    EXPECT_EQ(Fp32ToFp16(f), h) << "h=" << h;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xc000);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(1e6f), 0x7c00);                // overflow to inf
  EXPECT_EQ(Fp32ToFp16(5.960464477539063e-08f), 1);   // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(1.0f + 1.0f / 2048), 0x3c00);  // tie rounds to even
  EXPECT_EQ(Fp32ToFp16(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_FLOAT_EQ(Fp16ToFp32(0x3555), 0.333251953125f);
}

TEST(Half, Bf16) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFp32(0x3f80), 1.0f);
  for (uint32_t h = 0; h < 65536; h += 7) {
    const float f = Bf16ToFp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(Fp32ToBf16(f), h);
    }
  }
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// The bulk converters (vectorised where the CPU allows) must agree with the scalar ones on
// every fp16 value and on fp32 values around every rounding boundary, NaN aside.
TEST(Half, BulkMatchesScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> f(all.size());
  Fp16ToFp32(all.data(), f.data(), all.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    const float s = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(s)) {
      EXPECT_TRUE(std::isnan(f[h]));
    } else {
      EXPECT_EQ(f[h], s) << h;
    }
  }
  std::vector<float> probe;
  for (uint32_t h = 0; h < 0x7c00; h += 3) {
    const float a = Fp16ToFp32(static_cast<uint16_t>(h)), b = Fp16ToFp32(static_cast<uint16_t>(h + 1));
    for (float v : {a, (a + b) / 2, std::nextafter((a + b) / 2, 0.0f), std::nextafter((a + b) / 2, 1e9f)}) {
      probe.push_back(v);
      probe.push_back(-v);
    }
  }
  probe.push_back(1e9f);
  probe.push_back(-70000.0f);
  std::vector<uint16_t> bulk(probe.size());
  Fp32ToFp16(probe.data(), bulk.data(), probe.size());
  for (size_t i = 0; i < probe.size(); ++i) EXPECT_EQ(bulk[i], Fp32ToFp16(probe[i])) << probe[i];
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Every length (the vector body and the scalar tail), every kind of value.
TEST(Half, ClampToFp16RangeAndAllFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {0.0f, -0.0f, 1.5f, -3.25f, 65504.0f, -65504.0f, 65505.0f, -70000.0f, 1e30f, inf, -inf};
  for (size_t n = 0; n <= 13; ++n) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = values[(i * 7 + n) % std::size(values)];
    std::vector<float> clamped = x;
    ClampToFp16Range(clamped.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(clamped[i], std::clamp(x[i], -65504.0f, 65504.0f)) << n << "," << i;
    EXPECT_TRUE(AllFinite(clamped.data(), n));
    bool finite = true;
    for (float v : x) finite = finite && std::isfinite(v);
    EXPECT_EQ(AllFinite(x.data(), n), finite) << n;
  }
  std::vector<float> nan(6, 1.0f);
  nan[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(AllFinite(nan.data(), nan.size()));
  ClampToFp16Range(nan.data(), nan.size());
  EXPECT_TRUE(std::isnan(nan[4]));  // as std::clamp leaves it
  EXPECT_EQ(nan[5], 1.0f);
}

// The fused pass gives the bits of ClampToFp16Range then Fp32ToFp16, at every length (both
// vector widths and the scalar tail) on every path this CPU runs, NaN, infinities and overshoots included.
TEST(Half, Fp32ToFp16ClampedMatchesClampThenConvert) {
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {
      0.0f,     -0.0f,    1.5f,  -3.25f, 65504.0f, -65504.0f, 65505.0f, -70000.0f,
      65519.0f, 65520.0f, 1e-8f, 3e-5f,  1e30f,    inf,       -inf,     std::numeric_limits<float>::quiet_NaN()};
  for (VectorIsa isa : SupportedVectorIsas()) {
    for (size_t n = 0; n <= 41; ++n) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = values[(i * 7 + n) % std::size(values)] * (1.0f + 0.001f * i);
      const std::vector<float> original = x;
      std::vector<uint16_t> fused(n), expected(n);
      Fp32ToFp16Clamped(x.data(), fused.data(), n, isa);
      // Input untouched, bit for bit (NaN included); an empty vector may hold no buffer at all.
      if (n > 0) {
        EXPECT_EQ(0, std::memcmp(x.data(), original.data(), n * sizeof(float))) << n;
      }
      ClampToFp16Range(x.data(), n);
      Fp32ToFp16(x.data(), expected.data(), n);
      EXPECT_EQ(fused, expected) << VectorIsaName(isa) << " " << n;
    }
  }
}

}  // namespace
}  // namespace kvc
