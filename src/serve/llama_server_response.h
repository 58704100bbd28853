// The JSON of llama-server's own endpoints, in the shapes llama.cpp's server answers with (its
// tools/server/server-task.cpp and server-context.cpp at the pinned bundle; the fields a client
// reads are checked against a live llama-server by tests/compat): POST /completion's answer and
// stream events, `timings`, GET /props, GET /slots and the slot actions' answers. Pure
// functions of what a request produced, as openai_response.h is for OpenAI's shapes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/batch_scheduler.h"
#include "serve/completion_request.h"

namespace kvc {

// {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
// "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}: the prompt's time is the
// request's from arrival to its first token (restoring and prefilling what was not reused), the
// prediction's the rest.
nlohmann::json CompletionTimings(const Generation& g);

// The settings a request generated with: "generation_settings" of /completion, "params" of a
// slot, "default_generation_settings.params" of /props.
nlohmann::json GenerationSettings(const CompletionRequest& r, uint32_t n_ctx);

// What the whole (or last streamed) answer of POST /completion says besides its text.
struct NativeCompletion {
  std::string content;
  std::vector<int32_t> tokens;  // empty unless the request asked for return_tokens
  std::string model;
  std::string prompt;  // the prompt's text
  std::string finish_reason;
  std::string stop_word;
  std::vector<TokenLogprob> probabilities;  // with n_probs > 0
  bool with_probabilities = false;
};
nlohmann::json NativeCompletionObject(const NativeCompletion& c, const CompletionRequest& r, const Generation& g,
                                      uint32_t n_ctx);
// A streamed event with a piece of text; `tokens_predicted` so far.
nlohmann::json NativeCompletionChunk(const std::string& content, const std::vector<int32_t>& tokens,
                                     uint32_t tokens_predicted, uint32_t tokens_evaluated);

// GET /slots: one entry per sequence.
nlohmann::json SlotObject(int32_t id, uint32_t n_ctx, const BatchScheduler::SequenceView& view,
                          const nlohmann::json& params);

}  // namespace kvc
