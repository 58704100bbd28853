#include "fetch/prefill_split.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace kvc {
namespace {

TEST(PrefillSplit, ASlowLinkPrefillsTheFirstChunksWhileTheRestArrive) {
  // kvtiny at 0.01 Gbps: five 256-token chunks of ~50 KB (40 ms each) and a tail, a chunk's
  // prefill 68 ms. Fetching everything: 227 ms; prefilling two chunks while the rest arrive:
  // max(136, 147) = 147 ms, better than one (187) or three (204).
  const std::vector<double> fetch_s = {0.040, 0.040, 0.040, 0.040, 0.040, 0.027};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, 5, 0.068);
  EXPECT_EQ(split.prefilled_chunks, 2u);
  EXPECT_NEAR(split.predicted_s, 0.147, 1e-9);
}

TEST(PrefillSplit, AFastLinkFetchesEverything) {
  // A local store: a chunk in 1 ms, its prefill 68 ms.
  const std::vector<double> fetch_s(6, 0.001);
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, 5, 0.068);
  EXPECT_EQ(split.prefilled_chunks, 0u);
  EXPECT_NEAR(split.predicted_s, 0.006, 1e-9);
}

TEST(PrefillSplit, ASmallGainIsNotWorthASplit) {
  // Prefilling chunk 0 while chunk 1 arrives saves 5% (0.100 -> 0.095): under kMinSplitGain.
  const std::vector<double> fetch_s = {0.005, 0.095};
  EXPECT_EQ(ChoosePrefillSplit(fetch_s, 2, 0.090).prefilled_chunks, 0u);
  // Saving a third is.
  const std::vector<double> even = {0.050, 0.050};
  EXPECT_EQ(ChoosePrefillSplit(even, 2, 0.050).prefilled_chunks, 1u);
}

TEST(PrefillSplit, TheTailIsNeverPrefilled) {
  // Only the first `splittable` (whole) chunks may be prefilled, however slow the tail.
  const std::vector<double> fetch_s = {0.010, 0.500};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, 1, 0.001);
  EXPECT_EQ(split.prefilled_chunks, 0u);  // prefilling chunk 0 saves 10 ms of 510: under the gain
  const std::vector<double> two = {0.300, 0.300, 0.100};
  EXPECT_EQ(ChoosePrefillSplit(two, 2, 0.001).prefilled_chunks, 2u);
  EXPECT_NEAR(ChoosePrefillSplit(two, 2, 0.001).predicted_s, 0.100, 1e-9);
}

TEST(PrefillSplit, NoPrefillPriceMeansNoSplit) {
  const std::vector<double> fetch_s = {1.0, 1.0};
  EXPECT_EQ(ChoosePrefillSplit(fetch_s, 2, 0).prefilled_chunks, 0u);
  EXPECT_EQ(ChoosePrefillSplit(fetch_s, 2, std::numeric_limits<double>::quiet_NaN()).prefilled_chunks, 0u);
  EXPECT_EQ(ChoosePrefillSplit({}, 0, 0.1).prefilled_chunks, 0u);
}

TEST(PrefillSplit, AChunkThatCannotBeFetchedIsPrefilled) {
  // Chunk 0 has no allowed variant (never arrives): prefilling it is the only way past it.
  const double never = std::numeric_limits<double>::infinity();
  const std::vector<double> fetch_s = {never, 0.010, 0.010};
  const PrefillSplit split = ChoosePrefillSplit(fetch_s, 3, 0.050);
  EXPECT_EQ(split.prefilled_chunks, 1u);
  EXPECT_NEAR(split.predicted_s, 0.050, 1e-9);
}

}  // namespace
}  // namespace kvc
