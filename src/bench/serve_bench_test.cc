#include "bench/serve_bench.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvc {
namespace {

TEST(ServeBenchPercentile, IsTheSmallestValueWithPPercentAtOrBelowIt) {
  const std::vector<double> ten = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};  // unsorted on purpose
  EXPECT_EQ(PercentileNearestRank(ten, 50), 5);                     // rank ceil(5) = 5
  EXPECT_EQ(PercentileNearestRank(ten, 90), 9);                     // rank 9
  EXPECT_EQ(PercentileNearestRank(ten, 99), 10);                    // rank ceil(9.9) = 10
  EXPECT_EQ(PercentileNearestRank(ten, 100), 10);
  EXPECT_EQ(PercentileNearestRank(ten, 0), 1);   // clamped to the first rank
  EXPECT_EQ(PercentileNearestRank(ten, 51), 6);  // rank ceil(5.1) = 6
  // Always one of the values: no interpolation between 1 and 2.
  EXPECT_EQ(PercentileNearestRank({2, 1}, 50), 1);
  EXPECT_EQ(PercentileNearestRank({2, 1}, 51), 2);
  EXPECT_EQ(PercentileNearestRank({3.5}, 99), 3.5);
  EXPECT_EQ(PercentileNearestRank({}, 50), 0);
  // The published example (Wikipedia, "Percentile"): 15, 20, 35, 40, 50.
  const std::vector<double> five = {15, 20, 35, 40, 50};
  EXPECT_EQ(PercentileNearestRank(five, 5), 15);
  EXPECT_EQ(PercentileNearestRank(five, 30), 20);
  EXPECT_EQ(PercentileNearestRank(five, 40), 20);
  EXPECT_EQ(PercentileNearestRank(five, 50), 35);
  EXPECT_EQ(PercentileNearestRank(five, 100), 50);
}

TEST(ServeBenchTrace, IsDeterministicForASeedAndDiffersAcrossSeeds) {
  ServeBenchOptions o;
  o.requests = 40;
  const auto a = MakeServeTrace(o), b = MakeServeTrace(o);
  ASSERT_EQ(a.size(), 40u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
    EXPECT_EQ(a[i].shared, b[i].shared);
    EXPECT_EQ(a[i].prefix, b[i].prefix);
    EXPECT_EQ(a[i].unique_tokens, b[i].unique_tokens);
  }
  o.seed = 2;
  const auto c = MakeServeTrace(o);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs |= a[i].arrival_s != c[i].arrival_s || a[i].shared != c[i].shared;
  EXPECT_TRUE(differs);
}

TEST(ServeBenchTrace, HasTheAskedClassMixPrefixesAndLengths) {
  ServeBenchOptions o;
  o.requests = 200;
  o.shared_fraction = 0.3;
  o.prefixes = 4;
  o.unique_tokens = 160;
  const auto trace = MakeServeTrace(o);
  ASSERT_EQ(trace.size(), 200u);
  int shared = 0;
  std::vector<int> per_prefix(4, 0);
  for (const auto& r : trace) {
    if (r.shared) {
      ++shared;
      ASSERT_LT(r.prefix, 4u);
      ++per_prefix[r.prefix];
      EXPECT_EQ(r.unique_tokens, 0u);
    } else {
      EXPECT_GE(r.unique_tokens, 128u);
      EXPECT_LE(r.unique_tokens, 192u);
    }
  }
  EXPECT_EQ(shared, 60);  // exactly round(200 x 0.3)
  for (int n : per_prefix) EXPECT_GT(n, 0) << "every document is used";
  // Both classes spread over the trace, not bunched at one end.
  int shared_first_half = 0;
  for (size_t i = 0; i < 100; ++i) shared_first_half += trace[i].shared ? 1 : 0;
  EXPECT_GT(shared_first_half, 15);
  EXPECT_LT(shared_first_half, 45);

  o.shared_fraction = 0.5;
  o.requests = 7;
  int n = 0;
  for (const auto& r : MakeServeTrace(o)) n += r.shared ? 1 : 0;
  EXPECT_EQ(n, 4);  // round(3.5) = 4
}

TEST(ServeBenchTrace, ArrivalsArePoissonAtTheRate) {
  ServeBenchOptions o;
  o.requests = 2001;
  o.rate = 4;
  const auto trace = MakeServeTrace(o);
  EXPECT_EQ(trace.front().arrival_s, 0);
  double sum = 0, sum_sq = 0;
  for (size_t i = 1; i < trace.size(); ++i) {
    const double gap = trace[i].arrival_s - trace[i - 1].arrival_s;
    ASSERT_GE(gap, 0);
    sum += gap;
    sum_sq += gap * gap;
  }
  const double n = static_cast<double>(trace.size() - 1);
  const double mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
  // Exponential gaps: mean 1/rate and standard deviation equal to the mean (within sampling error).
  EXPECT_NEAR(mean, 0.25, 0.02);
  EXPECT_NEAR(sd, 0.25, 0.03);
}

}  // namespace
}  // namespace kvc
