#include "serve/llama_server_response.h"

#include <algorithm>

#include "base/utf8.h"
#include "serve/openai_response.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

// Milliseconds per item and items per second, as llama-server reports them (0 for no items).
std::pair<double, double> Rates(double ms, uint32_t n) {
  if (n == 0 || !(ms > 0)) return {0, 0};
  return {ms / n, 1e3 * n / ms};
}

// llama-server's stop_type: "eos", "word", "limit" (or "none" for a generation cut short).
const char* StopType(const std::string& finish_reason, const std::string& stop_word) {
  if (finish_reason == "length") return "limit";
  if (finish_reason == "stop") return stop_word.empty() ? "eos" : "word";
  return "none";
}

}  // namespace

Json CompletionTimings(const Generation& g) {
  const uint32_t prompt_n = g.prompt_tokens - std::min(g.prompt_tokens, g.cached_tokens);
  const double prompt_ms = g.ttft_s * 1e3;
  const double predicted_ms = std::max(0.0, g.total_s - g.ttft_s) * 1e3;
  const auto [prompt_per_token, prompt_per_second] = Rates(prompt_ms, prompt_n);
  const auto [predicted_per_token, predicted_per_second] = Rates(predicted_ms, g.completion_tokens);
  return {{"cache_n", g.cached_tokens},
          {"prompt_n", prompt_n},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", prompt_per_token},
          {"prompt_per_second", prompt_per_second},
          {"predicted_n", g.completion_tokens},
          {"predicted_ms", predicted_ms},
          {"predicted_per_token_ms", predicted_per_token},
          {"predicted_per_second", predicted_per_second}};
}

Json GenerationSettings(const CompletionRequest& r, uint32_t n_ctx) {
  const SamplingParams& p = r.sampling;
  // llama-server reports an unseeded request's seed as LLAMA_DEFAULT_SEED (0xFFFFFFFF).
  const uint64_t seed = p.seed.value_or(0xFFFFFFFFu);
  const int64_t n_predict = r.max_tokens == kToContextEnd ? -1 : int64_t{r.max_tokens};
  return {{"n_ctx", n_ctx},
          {"seed", seed},
          {"temperature", p.temperature},
          {"top_k", p.top_k},
          {"top_p", p.top_p},
          {"min_p", p.min_p},
          {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty},
          {"stop", r.stop},
          {"max_tokens", n_predict},
          {"n_predict", n_predict},
          {"n_keep", 0},
          {"stream", r.stream},
          {"n_probs", std::max(0, r.logprobs)},
          {"samplers", p.greedy() ? Json::array({"greedy"})
                                  : Json::array({"penalties", "top_k", "top_p", "min_p", "temperature"})}};
}

Json NativeCompletionObject(const NativeCompletion& c, const CompletionRequest& r, const Generation& g,
                            uint32_t n_ctx) {
  Json out = {{"index", 0},
              {"content", c.content},
              {"tokens", c.tokens},
              // The sequence is the scheduler's choice, not the client's: -1, as llama-server
              // reports a request it has not placed.
              {"id_slot", -1},
              {"stop", true},
              {"model", c.model},
              {"tokens_predicted", g.completion_tokens},
              {"tokens_evaluated", g.prompt_tokens},
              {"generation_settings", GenerationSettings(r, n_ctx)},
              {"prompt", c.prompt},
              {"has_new_line", c.content.find('\n') != std::string::npos},
              {"truncated", false},
              {"stop_type", StopType(c.finish_reason, c.stop_word)},
              {"stopping_word", c.stop_word},
              {"tokens_cached", g.prompt_tokens + g.completion_tokens},
              {"timings", CompletionTimings(g)}};
  if (c.with_probabilities) out["completion_probabilities"] = TokenLogprobEntries(c.probabilities);
  return out;
}

Json NativeCompletionChunk(const std::string& content, const std::vector<int32_t>& tokens, uint32_t tokens_predicted,
                           uint32_t tokens_evaluated) {
  return {{"index", 0},
          {"content", content},
          {"tokens", tokens},
          {"stop", false},
          {"id_slot", -1},
          {"tokens_predicted", tokens_predicted},
          {"tokens_evaluated", tokens_evaluated}};
}

Json SlotObject(int32_t id, uint32_t n_ctx, const BatchScheduler::SequenceView& view, const Json& params) {
  return {{"id", id},
          {"n_ctx", n_ctx},
          {"speculative", false},
          {"is_processing", view.processing},
          {"n_prompt_tokens", view.prompt_tokens},
          // Tokens a free sequence holds for a later request to continue (kvcodec's hot tier).
          {"n_cached_tokens", view.held.size()},
          {"params", params},
          {"next_token",
           Json::array(
               {{{"has_next_token", view.processing}, {"has_new_line", false}, {"n_remain", -1}, {"n_decoded", 0}}})}};
}

}  // namespace kvc
