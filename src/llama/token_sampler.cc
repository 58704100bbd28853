#include "llama/token_sampler.h"

#include <llama.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <random>

namespace kvc {

Status CheckSamplingParams(const SamplingParams& p) {
  // NaN fails every one of these comparisons, so it is refused too.
  if (!(p.temperature >= 0 && p.temperature <= 2)) return InvalidArgument("'temperature' must be in 0..2");
  if (!(p.top_p > 0 && p.top_p <= 1)) return InvalidArgument("'top_p' must be in (0, 1]");
  if (p.top_k < 0) return InvalidArgument("'top_k' must be 0 (off) or positive");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return InvalidArgument("'min_p' must be in 0..1");
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return InvalidArgument("'presence_penalty' must be in -2..2");
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return InvalidArgument("'frequency_penalty' must be in -2..2");
  return Status::Ok();
}

namespace {

// llama.cpp's dist sampler takes 32 bits and reads LLAMA_DEFAULT_SEED as "random": fold the
// client's 64-bit seed into the other 2^32 - 1 values.
uint32_t DrawSeed(const std::optional<uint64_t>& seed, uint64_t offset) {
  if (!seed) return std::random_device{}() % LLAMA_DEFAULT_SEED;
  const uint64_t s = *seed + offset;
  const uint32_t folded = static_cast<uint32_t>(s ^ (s >> 32));
  return folded == LLAMA_DEFAULT_SEED ? folded - 1 : folded;
}

}  // namespace

Result<std::unique_ptr<TokenSampler>> TokenSampler::Create(const SamplingParams& p, uint32_t n_vocab,
                                                           uint32_t penalty_window, uint64_t seed_offset) {
  assert(CheckSamplingParams(p).ok() && "sampling settings are checked where they come in");
  if (n_vocab == 0) return InvalidArgument("the vocabulary is empty");
  std::unique_ptr<TokenSampler> s(new TokenSampler());
  s->greedy_ = p.greedy();
  if (s->greedy_) return s;
  // The order llama.cpp's own server uses: penalties on the raw logits, then the filters, then
  // temperature and the draw.
  s->chain_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (s->chain_ == nullptr) return Internal("llama.cpp could not create a sampler chain");
  if (p.presence_penalty != 0 || p.frequency_penalty != 0) {
    llama_sampler_chain_add(
        s->chain_, llama_sampler_init_penalties(static_cast<int32_t>(n_vocab), static_cast<int32_t>(penalty_window),
                                                1.0f, p.frequency_penalty, p.presence_penalty));
  }
  if (p.top_k > 0) llama_sampler_chain_add(s->chain_, llama_sampler_init_top_k(p.top_k));
  if (p.top_p < 1) llama_sampler_chain_add(s->chain_, llama_sampler_init_top_p(p.top_p, 1));
  if (p.min_p > 0) llama_sampler_chain_add(s->chain_, llama_sampler_init_min_p(p.min_p, 1));
  llama_sampler_chain_add(s->chain_, llama_sampler_init_temp(p.temperature));
  llama_sampler_chain_add(s->chain_, llama_sampler_init_dist(DrawSeed(p.seed, seed_offset)));
  s->scratch_.resize(sizeof(llama_token_data) * n_vocab);
  return s;
}

TokenSampler::~TokenSampler() {
  if (chain_ != nullptr) llama_sampler_free(chain_);
}

int32_t TokenSampler::Sample(std::span<const float> logits) {
  if (greedy_) return GreedyToken(logits);
  const size_t n = std::min(logits.size(), scratch_.size() / sizeof(llama_token_data));
  auto* data = reinterpret_cast<llama_token_data*>(scratch_.data());
  for (size_t i = 0; i < n; ++i) data[i] = {static_cast<llama_token>(i), logits[i], 0.0f};
  llama_token_data_array candidates{data, n, -1, false};
  llama_sampler_apply(chain_, &candidates);
  // The dist sampler always selects one; a chain that did not is a llama.cpp change to notice,
  // not a reason to read out of bounds.
  const llama_token token = candidates.selected >= 0 && static_cast<size_t>(candidates.selected) < candidates.size
                                ? candidates.data[candidates.selected].id
                                : GreedyToken(logits);
  llama_sampler_accept(chain_, token);
  return token;
}

int32_t GreedyToken(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, uint32_t top) {
  TokenLogprobs out;
  out.token = token;
  if (logits.empty()) return out;
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_z = max_logit + std::log(sum);
  auto logprob = [&](int32_t t) { return static_cast<float>(logits[static_cast<size_t>(t)] - log_z); };
  if (token >= 0 && static_cast<size_t>(token) < logits.size()) out.logprob = logprob(token);
  const size_t k = std::min<size_t>(top, logits.size());
  if (k == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] != logits[static_cast<size_t>(b)]
               ? logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]
               : a < b;
  });
  for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
}

}  // namespace kvc
