#include "fetch/prefill_split.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace kvc {
namespace {

// The first `chunks` chunks each at `chunk_s`: what a split may prefill.
std::vector<double> Flat(uint32_t chunks, double chunk_s) {
  std::vector<double> prefix(chunks);
  for (uint32_t k = 1; k <= chunks; ++k) prefix[k - 1] = chunk_s * k;
  return prefix;
}

TEST(PrefillSplit, ASlowLinkPrefillsTheFirstChunksWhileTheRestArrive) {
  // kvtiny at 0.01 Gbps: five 256-token chunks of ~50 KB (40 ms each) and a tail, a chunk's
  // prefill 68 ms. Fetching everything: 227 ms; prefilling two chunks while the rest arrive:
  // max(136, 147) = 147 ms, better than one (187) or three (204).
  const std::vector<double> fetch_s = {0.040, 0.040, 0.040, 0.040, 0.040, 0.027};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, Flat(5, 0.068));
  EXPECT_EQ(split.prefilled_chunks, 2u);
  EXPECT_NEAR(split.predicted_s, 0.147, 1e-9);
}

TEST(PrefillSplit, AFastLinkFetchesEverything) {
  // A local store: a chunk in 1 ms, its prefill 68 ms.
  const std::vector<double> fetch_s(6, 0.001);
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, Flat(5, 0.068));
  EXPECT_EQ(split.prefilled_chunks, 0u);
  EXPECT_NEAR(split.predicted_s, 0.006, 1e-9);
}

TEST(PrefillSplit, ASmallGainIsNotWorthASplit) {
  // Prefilling chunk 0 while chunk 1 arrives saves 5% (0.100 -> 0.095): under kMinSplitGain.
  const std::vector<double> fetch_s = {0.005, 0.095};
  EXPECT_EQ(ChoosePrefillSplit(fetch_s, Flat(2, 0.090)).prefilled_chunks, 0u);
  // Saving a third is.
  const std::vector<double> even = {0.050, 0.050};
  EXPECT_EQ(ChoosePrefillSplit(even, Flat(2, 0.050)).prefilled_chunks, 1u);
}

TEST(PrefillSplit, TheTailIsNeverPrefilled) {
  // Only the first `splittable` (whole) chunks may be prefilled, however slow the tail.
  const std::vector<double> fetch_s = {0.010, 0.500};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, Flat(1, 0.001));
  EXPECT_EQ(split.prefilled_chunks, 0u);  // prefilling chunk 0 saves 10 ms of 510: under the gain
  const std::vector<double> two = {0.300, 0.300, 0.100};
  EXPECT_EQ(ChoosePrefillSplit(two, Flat(2, 0.001)).prefilled_chunks, 2u);
  EXPECT_NEAR(ChoosePrefillSplit(two, Flat(2, 0.001)).predicted_s, 0.100, 1e-9);
}

TEST(PrefillSplit, NoPrefillPriceMeansNoSplit) {
  const std::vector<double> fetch_s = {1.0, 1.0};
  EXPECT_EQ(ChoosePrefillSplit(fetch_s, Flat(2, 0)).prefilled_chunks, 0u);
  EXPECT_EQ(ChoosePrefillSplit(fetch_s, Flat(2, std::numeric_limits<double>::quiet_NaN())).prefilled_chunks, 0u);
  EXPECT_EQ(ChoosePrefillSplit({}, Flat(0, 0.1)).prefilled_chunks, 0u);
}

TEST(PrefillSplit, AChunkThatCannotBeFetchedIsPrefilled) {
  // Chunk 0 has no allowed variant (never arrives): prefilling it is the only way past it.
  const double never = std::numeric_limits<double>::infinity();
  const std::vector<double> fetch_s = {never, 0.010, 0.010};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, Flat(3, 0.050));
  EXPECT_EQ(split.prefilled_chunks, 1u);
  EXPECT_NEAR(split.predicted_s, 0.050, 1e-9);
}

// Later chunks cost more to prefill (they attend to more), so the split prefills more of the
// cheap first chunks than a flat price at the later chunks' cost would.
TEST(PrefillSplit, PricesEachChunkAtItsPosition) {
  const std::vector<double> fetch_s = {0.040, 0.040, 0.040, 0.040, 0.040, 0.027};
  // 50, 60, 70, 80, 90 ms for chunks 0..4: two (max(110, 147)) beat three (max(180, 107)).
  const std::vector<double> growing = {0.050, 0.110, 0.180, 0.260, 0.350};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, growing);
  EXPECT_EQ(split.prefilled_chunks, 2u);
  EXPECT_NEAR(split.predicted_s, 0.147, 1e-9);
  // 20, 25, 30 ms for the first three: three (max(75, 107)) beat two (max(45, 147)).
  const std::vector<double> three_cheap = {0.020, 0.045, 0.075, 0.180, 0.250};
  const PrefillSplit later = ChoosePrefillSplit(fetch_s, three_cheap);
  EXPECT_EQ(later.prefilled_chunks, 3u);
  EXPECT_NEAR(later.predicted_s, 0.107, 1e-9);
  // A price that is not a number ends what may be prefilled.
  const std::vector<double> unpriced = {0.020, std::numeric_limits<double>::quiet_NaN(), 0.075};
  EXPECT_LE(ChoosePrefillSplit(fetch_s, unpriced).prefilled_chunks, 1u);
}

}  // namespace
}  // namespace kvc
