// The start-up probe that prices a server's prefills by position, on the test model.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "llama/llama_model.h"
#include "reuse/prefix_reuse.h"

namespace kvc {
namespace {

std::unique_ptr<LlamaSession> NewSession(const LlamaModel& model, uint32_t n_ctx) {
  SessionOptions options;
  options.n_ctx = n_ctx;
  options.n_batch = 512;
  options.n_threads = 1;
  return LlamaSession::Create(model, options).value();
}

TEST(PrefillProbe, PricesByPositionAndLeavesTheSessionEmpty) {
  auto model = LlamaModel::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto session = NewSession(**model, 2048);
  const std::vector<int32_t> probe(64, (*model)->has_bos() ? (*model)->bos_token() : 0);
  const auto cost = MeasurePrefillCost(*session, (*model)->info(), probe);
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  EXPECT_TRUE(cost->known());
  EXPECT_TRUE(std::isfinite(cost->per_token_s) && std::isfinite(cost->per_token_position_s));
  // A chunk costs something, and not a second (kvtiny prefills thousands of tokens a second).
  EXPECT_GT(cost->Seconds(0, 256), 0);
  EXPECT_LT(cost->Seconds(0, 256), 1.0);
  // Empty again: the next prompt starts at position 0, and a whole context still fits.
  EXPECT_EQ(session->n_cached(), 0u);
  const std::vector<int32_t> prompt(2000, probe[0]);
  EXPECT_TRUE(session->Eval(prompt, false).ok());
  EXPECT_EQ(session->n_cached(), 2000u);
}

// Too short a context to put the deep probe far from the first: no position term is guessed.
TEST(PrefillProbe, AShortContextGivesAFlatCost) {
  auto model = LlamaModel::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto session = NewSession(**model, 256);
  const std::vector<int32_t> probe(64, (*model)->has_bos() ? (*model)->bos_token() : 0);
  const auto cost = MeasurePrefillCost(*session, (*model)->info(), probe);
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  EXPECT_GT(cost->per_token_s, 0);
  EXPECT_EQ(cost->per_token_position_s, 0);
  EXPECT_FALSE(MeasurePrefillCost(*session, (*model)->info(), {}).ok()) << "an empty probe";
}

}  // namespace
}  // namespace kvc
