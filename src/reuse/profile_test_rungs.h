// Test profiles: rungs scored alike in both windows of a profile, bounds at their figures, so a
// test says in one line what a rung measured.
#pragma once

#include <string>

#include "reuse/model_profile.h"

namespace kvc {

inline ProfileRung MeasuredRung(std::string codec, std::string level, double ratio, double ppl_delta_pct,
                                double top1_agreement, double kl_mean) {
  ProfileRung r{.codec = std::move(codec), .level = std::move(level), .ratio = ratio, .windows = {}};
  for (uint32_t tokens : {8u, 32u}) {
    r.windows.push_back({.tokens = tokens,
                         .positions = 2048u * tokens / 8,
                         .ppl_delta_pct = ppl_delta_pct,
                         .ppl_delta_pct_bound = ppl_delta_pct,
                         .top1_agreement = top1_agreement,
                         .top1_agreement_bound = top1_agreement,
                         .kl_mean = kl_mean,
                         .kl_mean_bound = kl_mean});
  }
  return r;
}

// The geometry MeasureProfile writes for a 1024-token window.
inline void SetProfileGeometry(ModelProfile& p) {
  p.docs = 16;
  p.prefix_lengths.clear();
  for (uint32_t j = 1; j <= 16; ++j) p.prefix_lengths.push_back(991 * j / 16);
  p.windows = {8, 32};
  p.resamples = 2000;
  p.confidence = 0.95;
}

}  // namespace kvc
