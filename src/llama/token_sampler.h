// Choosing the next token from a sequence's logits: greedy, or sampled through llama.cpp's
// sampler chain (penalties, top-k, top-p, min-p, temperature, a seeded draw) with per-request
// settings; and the log-probabilities a client asks for beside the text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

struct llama_sampler;

namespace kvc {

// OpenAI's sampling fields (top_k and min_p as llama.cpp's server has them). The defaults are
// greedy decoding: what a request that sends none of them gets.
struct SamplingParams {
  float temperature = 0;         // 0: greedy (the rest is then ignored); at most 2
  float top_p = 1;               // nucleus: the smallest set holding this much probability (0, 1]
  int32_t top_k = 0;             // the k most likely tokens only; 0: all
  float min_p = 0;               // tokens at least this fraction of the best one's probability
  float presence_penalty = 0;    // -2..2, subtracted once from a token already generated
  float frequency_penalty = 0;   // -2..2, subtracted per time a token was generated
  std::optional<uint64_t> seed;  // same seed and request -> same text; none: a random draw
  bool greedy() const { return temperature <= 0; }
};

// The range checks of every field, with a message that names the field. Called once, where the
// settings come in: RunJob for `run`, the request parser for `serve`, the C API's sampler and
// run calls; what is built from them afterwards (TokenSampler) trusts them.
[[nodiscard]] Status CheckSamplingParams(const SamplingParams& params);

// One sequence's sampler: holds the chain's state (the penalties' token counts, the random
// generator), so each generated sequence has its own.
class TokenSampler {
 public:
  // `params` must have passed CheckSamplingParams: the sampler does not check them again (a
  // debug build asserts it). Errors: an empty vocabulary, llama.cpp failing to make a chain.
  // `seed_offset` separates the n choices of one request that share a seed.
  static Result<std::unique_ptr<TokenSampler>> Create(const SamplingParams& params, uint32_t n_vocab,
                                                      uint32_t penalty_window, uint64_t seed_offset = 0);
  ~TokenSampler();
  TokenSampler(const TokenSampler&) = delete;
  TokenSampler& operator=(const TokenSampler&) = delete;

  // The next token from `logits` (n_vocab of them); the token is then counted as generated.
  int32_t Sample(std::span<const float> logits);

 private:
  TokenSampler() = default;
  bool greedy_ = true;
  llama_sampler* chain_ = nullptr;
  std::vector<uint8_t> scratch_;  // llama_token_data, kept between calls (n_vocab entries)
};

// Greedy decoding: the token with the highest logit (the first of equals).
int32_t GreedyToken(std::span<const float> logits);

// A token's log-probability under the model (the logits' softmax, before any sampling
// setting) and the `top` most likely tokens' (most likely first, ties by lower id).
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, uint32_t top);

}  // namespace kvc
