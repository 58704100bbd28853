#include "serve/llama_server_response.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

using Json = nlohmann::json;

Generation Done() {
  Generation g;
  g.prompt_tokens = 10;
  g.cached_tokens = 6;
  g.completion_tokens = 4;
  g.ttft_s = 0.008;
  g.total_s = 0.020;
  g.finish_reasons = {"stop"};
  g.stop_words = {"\n"};
  return g;
}

TEST(LlamaServerResponse, TimingsSplitThePromptFromThePrediction) {
  const Json t = CompletionTimings(Done());
  EXPECT_EQ(t["cache_n"], 6);
  EXPECT_EQ(t["prompt_n"], 4);
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_second"].get<double>(), 500.0);
  EXPECT_EQ(t["predicted_n"], 4);
  EXPECT_NEAR(t["predicted_ms"].get<double>(), 12.0, 1e-9);
  EXPECT_NEAR(t["predicted_per_token_ms"].get<double>(), 3.0, 1e-9);
  Generation none;  // nothing generated, nothing timed: zeros, never a division by zero
  const Json zeros = CompletionTimings(none);
  for (const auto& [k, v] : zeros.items()) EXPECT_EQ(v.get<double>(), 0.0) << k;
}

TEST(LlamaServerResponse, CompletionSaysWhyItStoppedAsLlamaServerDoes) {
  CompletionRequest r;
  r.max_tokens = 4;
  r.stop = {"\n"};
  NativeCompletion c{"In the", {}, "kvtiny", "<s> x", "stop", "\n", {}, false};
  Generation g = Done();
  Json out = NativeCompletionObject(c, r, g, 512);
  EXPECT_EQ(out["content"], "In the");
  EXPECT_EQ(out["stop"], true);
  EXPECT_EQ(out["stop_type"], "word");
  EXPECT_EQ(out["stopping_word"], "\n");
  EXPECT_EQ(out["tokens_predicted"], 4);
  EXPECT_EQ(out["tokens_evaluated"], 10);
  EXPECT_EQ(out["generation_settings"]["n_predict"], 4);
  EXPECT_EQ(out["generation_settings"]["n_ctx"], 512);
  EXPECT_TRUE(out.contains("timings"));
  EXPECT_FALSE(out.contains("completion_probabilities"));
  c.stop_word.clear();
  EXPECT_EQ(NativeCompletionObject(c, r, g, 512)["stop_type"], "eos");
  c.finish_reason = "length";
  EXPECT_EQ(NativeCompletionObject(c, r, g, 512)["stop_type"], "limit");
  r.max_tokens = kToContextEnd;
  EXPECT_EQ(NativeCompletionObject(c, r, g, 512)["generation_settings"]["n_predict"], -1);
  c.with_probabilities = true;
  c.probabilities = {TokenLogprob{"ge", -3.5f, {{"ch", -2.8f}}, 0}};
  const Json p = NativeCompletionObject(c, r, g, 512)["completion_probabilities"];
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["token"], "ge");
  EXPECT_EQ(p[0]["bytes"], Json::array({'g', 'e'}));
  EXPECT_EQ(p[0]["top_logprobs"][0]["token"], "ch");
}

TEST(LlamaServerResponse, SlotsShowWhatEachSequenceDoes) {
  BatchScheduler::SequenceView free_one{false, 7, {1, 2, 3}};
  const Json s = SlotObject(1, 256, free_one, Json::object());
  EXPECT_EQ(s["id"], 1);
  EXPECT_EQ(s["n_ctx"], 256);
  EXPECT_EQ(s["is_processing"], false);
  EXPECT_EQ(s["n_prompt_tokens"], 7);
  EXPECT_EQ(s["n_cached_tokens"], 3);
  EXPECT_TRUE(s["next_token"].is_array());
}

}  // namespace
}  // namespace kvc
