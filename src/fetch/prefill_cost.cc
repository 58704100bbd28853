#include "fetch/prefill_cost.h"

#include <algorithm>
#include <cmath>

namespace kvc {

double PrefillCost::Seconds(uint64_t first, uint64_t tokens) const {
  const double n = static_cast<double>(tokens);
  return n * (per_token_s + per_token_position_s * (static_cast<double>(first) + n / 2));
}

std::vector<double> PrefillCost::Prefix(uint32_t chunks, uint32_t chunk_tokens) const {
  std::vector<double> out(chunks);
  for (uint32_t k = 1; k <= chunks; ++k) out[k - 1] = Seconds(0, uint64_t{k} * chunk_tokens);
  return out;
}

PrefillCostEstimator::PrefillCostEstimator(PrefillCost seed) {
  // Two points on the seed's line, at the start and 2,048 positions in, worth one observation:
  // enough to answer before any prefill, outweighed by the first few.
  constexpr double kTokens = 64, kDeep = 2048;
  for (const double first : {0.0, kDeep}) {
    const double x2 = kTokens * (first + kTokens / 2);
    Add(kTokens, x2, kTokens * seed.per_token_s + x2 * seed.per_token_position_s, 0.5);
  }
}

void PrefillCostEstimator::Add(double x1, double x2, double y, double weight) {
  s11_ += weight * x1 * x1;
  s12_ += weight * x1 * x2;
  s22_ += weight * x2 * x2;
  s1y_ += weight * x1 * y;
  s2y_ += weight * x2 * y;
}

void PrefillCostEstimator::Observe(uint64_t first, uint64_t tokens, double seconds) {
  if (tokens == 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  const double n = static_cast<double>(tokens);
  std::lock_guard lock(mu_);
  s11_ *= kDecay;
  s12_ *= kDecay;
  s22_ *= kDecay;
  s1y_ *= kDecay;
  s2y_ *= kDecay;
  Add(n, n * (static_cast<double>(first) + n / 2), seconds, 1);
}

PrefillCost PrefillCostEstimator::Now() const {
  std::lock_guard lock(mu_);
  // One term alone, where the fit of both would make the other negative (or cannot be made:
  // every prefill seen at one depth).
  const PrefillCost flat{s11_ > 0 ? std::max(0.0, s1y_ / s11_) : 0, 0};
  const PrefillCost by_position{0, s22_ > 0 ? std::max(0.0, s2y_ / s22_) : 0};
  const double det = s11_ * s22_ - s12_ * s12_;
  if (det > 1e-9 * s11_ * s22_) {
    const double a = (s1y_ * s22_ - s2y_ * s12_) / det;
    const double b = (s2y_ * s11_ - s1y_ * s12_) / det;
    if (a >= 0 && b >= 0) return {a, b};
  }
  // The one of the two that fits better: the smaller squared error (sum y^2 is common to both).
  const double gain_flat = s11_ > 0 ? s1y_ * s1y_ / s11_ : 0;
  const double gain_position = s22_ > 0 ? s2y_ * s2y_ / s22_ : 0;
  return gain_flat >= gain_position ? flat : by_position;
}

}  // namespace kvc
