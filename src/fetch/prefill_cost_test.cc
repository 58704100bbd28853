#include "fetch/prefill_cost.h"

#include <gtest/gtest.h>

#include <limits>
#include <thread>
#include <vector>

namespace kvc {
namespace {

TEST(PrefillCost, PricesATokenByItsPosition) {
  const PrefillCost cost{1e-4, 1e-7};
  // 256 tokens from 0: mean position 128.
  EXPECT_NEAR(cost.Seconds(0, 256), 256 * (1e-4 + 1e-7 * 128), 1e-12);
  EXPECT_GT(cost.Seconds(1024, 256), cost.Seconds(0, 256));
  EXPECT_NEAR(cost.Seconds(0, 512), cost.Seconds(0, 256) + cost.Seconds(256, 256), 1e-12) << "additive";
  const std::vector<double> prefix = cost.Prefix(3, 256);
  ASSERT_EQ(prefix.size(), 3u);
  EXPECT_NEAR(prefix[2], cost.Seconds(0, 768), 1e-12);
  EXPECT_FALSE(PrefillCost{}.known());
  EXPECT_TRUE(cost.known());
}

TEST(PrefillCost, TheEstimatorStartsAtItsSeed) {
  const PrefillCost seed{2e-4, 5e-8};
  const PrefillCost now = PrefillCostEstimator(seed).Now();
  EXPECT_NEAR(now.per_token_s, seed.per_token_s, 1e-12);
  EXPECT_NEAR(now.per_token_position_s, seed.per_token_position_s, 1e-15);
}

// A wrong seed (a cold probe that overprices, as a server's start-up probe did) is outweighed by
// the prefills the server times: three batches of one prompt give both terms back.
TEST(PrefillCost, LearnsBothTermsFromPrefillsAtSeveralDepths) {
  const PrefillCost truth{1.2e-4, 4e-8};
  PrefillCostEstimator estimator({4e-4, 0});
  for (int prompt = 0; prompt < 3; ++prompt) {
    estimator.Observe(0, 512, truth.Seconds(0, 512));
    estimator.Observe(512, 512, truth.Seconds(512, 512));
    estimator.Observe(1024, 426, truth.Seconds(1024, 426));
  }
  const PrefillCost now = estimator.Now();
  EXPECT_NEAR(now.per_token_s, truth.per_token_s, 0.05 * truth.per_token_s);
  EXPECT_NEAR(now.per_token_position_s, truth.per_token_position_s, 0.1 * truth.per_token_position_s);
}

TEST(PrefillCost, NeverGoesNegativeAndIgnoresWhatSaysNothing) {
  PrefillCostEstimator estimator({1e-4, 0});
  // Deeper prefills that ran faster (the machine got quieter): no negative slope comes of it.
  for (int i = 0; i < 10; ++i) {
    estimator.Observe(0, 256, 0.05);
    estimator.Observe(2048, 256, 0.02);
  }
  const PrefillCost now = estimator.Now();
  EXPECT_GE(now.per_token_s, 0);
  EXPECT_GE(now.per_token_position_s, 0);
  EXPECT_TRUE(now.known());
  const PrefillCost before = estimator.Now();
  estimator.Observe(0, 0, 1.0);
  estimator.Observe(0, 256, -1.0);
  estimator.Observe(0, 256, std::numeric_limits<double>::infinity());
  estimator.Observe(0, 256, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(estimator.Now().per_token_s, before.per_token_s);
  EXPECT_EQ(estimator.Now().per_token_position_s, before.per_token_position_s);
}

// The engine observes while fetch threads price splits (run under TSan by scripts/test.sh).
TEST(PrefillCost, ObservedAndReadFromManyThreads) {
  PrefillCostEstimator estimator({1e-4, 1e-8});
  std::thread engine([&] {
    for (int i = 0; i < 2000; ++i) estimator.Observe(static_cast<uint64_t>(i % 8) * 256, 256, 0.03 + 1e-5 * (i % 8));
  });
  double seen = 0;
  for (int i = 0; i < 2000; ++i) seen += estimator.Now().Seconds(0, 256);
  engine.join();
  EXPECT_GT(seen, 0);
}

}  // namespace
}  // namespace kvc
