#include "transform_coding/water_filling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace kvc {
namespace {

TEST(WaterFilling, SingleComponent) {
  const std::vector<double> l = {4.0};
  EXPECT_NEAR(ReverseWaterFillingRate(l, 1.0), 1.0, 1e-12);  // 0.5 log2(4)
  EXPECT_NEAR(ReverseWaterFillingRate(l, 0.25), 2.0, 1e-12);
  EXPECT_NEAR(ReverseWaterFillingRate(l, 3.0), 0.5 * std::log2(4.0 / 3.0), 1e-12);
}

TEST(WaterFilling, AllEqual) {
  // n components of variance l at total distortion D: theta = D / n, R = n/2 log2(n l / D).
  const std::vector<double> l(8, 2.0);
  EXPECT_NEAR(ReverseWaterFillingRate(l, 4.0), 8 * 0.5 * std::log2(2.0 / 0.5), 1e-12);
}

TEST(WaterFilling, SmallComponentsAreDropped) {
  // theta = 1: the 0.5 and 0.25 components are spent entirely (0.75), the others get 1 each.
  const std::vector<double> l = {16.0, 4.0, 0.5, 0.25};
  EXPECT_NEAR(ReverseWaterFillingRate(l, 2.75), 0.5 * std::log2(16.0) + 0.5 * std::log2(4.0), 1e-12);
  // Order does not matter.
  const std::vector<double> shuffled = {0.5, 16.0, 0.25, 4.0};
  EXPECT_NEAR(ReverseWaterFillingRate(shuffled, 2.75), 3.0, 1e-12);
}

TEST(WaterFilling, DistortionAtOrAboveTotalCostsNothing) {
  const std::vector<double> l = {3.0, 2.0, 1.0};
  EXPECT_EQ(ReverseWaterFillingRate(l, 6.0), 0.0);
  EXPECT_EQ(ReverseWaterFillingRate(l, 100.0), 0.0);
  EXPECT_EQ(ReverseWaterFillingRate({}, 1.0), 0.0);
  const std::vector<double> zeros(4, 0.0);
  EXPECT_EQ(ReverseWaterFillingRate(zeros, 0.0), 0.0);
}

TEST(WaterFilling, EdgeCases) {
  const std::vector<double> l = {3.0, -1e-9, 1.0};
  EXPECT_EQ(ReverseWaterFillingRate(l, 0.0), std::numeric_limits<double>::infinity());
  EXPECT_NEAR(ReverseWaterFillingRate(l, 2.0), 0.5 * std::log2(3.0), 1e-12);  // negative counts as 0
  EXPECT_TRUE(std::isnan(ReverseWaterFillingRate(l, std::numeric_limits<double>::quiet_NaN())));
  const std::vector<double> bad = {1.0, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(ReverseWaterFillingRate(bad, 0.5)));
}

TEST(WaterFilling, MonotoneDecreasingInDistortion) {
  std::vector<double> l;
  l.reserve(64);
  for (int i = 0; i < 64; ++i) l.push_back(10.0 * std::pow(0.8, i));
  double total = 0;
  for (double v : l) total += v;
  double last = std::numeric_limits<double>::infinity();
  for (int k = 1; k <= 200; ++k) {
    const double d = total * k / 200.0;
    const double r = ReverseWaterFillingRate(l, d);
    EXPECT_LT(r, last) << d;
    EXPECT_GE(r, 0.0);
    last = r;
  }
  EXPECT_EQ(last, 0.0);
}

}  // namespace
}  // namespace kvc
