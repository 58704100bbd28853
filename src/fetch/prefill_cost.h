// What prefilling costs on this machine, by position: a token at position p attends to the p
// cells before it, so a prefill of `tokens` tokens from `first` costs about
//   tokens * (per_token_s + per_token_position_s * (first + tokens / 2)).
// A split (prefill_split.h) prefills a prompt's first chunks, the cheapest ones; a flat price
// per chunk overprices them when it was measured deep in a context and underprices the deep
// ones when it was measured at the start, and either way the split lands on the wrong chunk.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace kvc {

struct PrefillCost {
  double per_token_s = 0;
  double per_token_position_s = 0;

  bool known() const { return per_token_s > 0 || per_token_position_s > 0; }
  double Seconds(uint64_t first, uint64_t tokens) const;
  // prefix[k - 1]: seconds to prefill chunks 0 .. k - 1 of `chunk_tokens` each, k = 1 .. chunks.
  std::vector<double> Prefix(uint32_t chunks, uint32_t chunk_tokens) const;
};

// The cost fitted to prefills timed here (least squares over both terms, none negative), the
// latest weighing most: a machine's load changes, and so does its price. Starts from `seed` (a
// start-up probe), which the first few observations outweigh. Safe to use from any thread.
class PrefillCostEstimator {
 public:
  explicit PrefillCostEstimator(PrefillCost seed);

  // A prefill of `tokens` tokens from position `first` that took `seconds`. Ignored when it
  // says nothing (no tokens, a time that is not a positive finite number).
  void Observe(uint64_t first, uint64_t tokens, double seconds);
  PrefillCost Now() const;

 private:
  // Weight an observation keeps per newer one.
  static constexpr double kDecay = 0.8;
  mutable std::mutex mu_;
  // Decayed sums of x1 = tokens, x2 = tokens * mean position, y = seconds.
  double s11_ = 0, s12_ = 0, s22_ = 0, s1y_ = 0, s2y_ = 0;
  void Add(double x1, double x2, double y, double weight);
};

}  // namespace kvc
