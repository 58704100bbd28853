#include "quality/bootstrap_bound.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/split_mix.h"

namespace kvc {
namespace {

struct Figures {
  double ppl_delta_pct = 0, top1 = 0, kl = 0;
};

Figures FiguresOf(const DocumentSums& s) {
  if (s.positions == 0) return {};
  const double n = static_cast<double>(s.positions);
  return {.ppl_delta_pct = 100.0 * std::expm1((s.nll_codec - s.nll_base) / n),
          .top1 = static_cast<double>(s.agree) / n,
          .kl = s.kl / n};
}

void Accumulate(DocumentSums& into, const DocumentSums& s) {
  into.nll_base += s.nll_base;
  into.nll_codec += s.nll_codec;
  into.kl += s.kl;
  into.agree += s.agree;
  into.positions += s.positions;
}

}  // namespace

WindowScore BoundedWindowScore(uint32_t tokens, std::span<const DocumentSums> docs, uint32_t resamples,
                               double confidence) {
  DocumentSums all;
  for (const DocumentSums& d : docs) Accumulate(all, d);
  const Figures point = FiguresOf(all);
  WindowScore w{.tokens = tokens,
                .positions = static_cast<uint32_t>(std::min<uint64_t>(all.positions, UINT32_MAX)),
                .ppl_delta_pct = point.ppl_delta_pct,
                .ppl_delta_pct_bound = point.ppl_delta_pct,
                .top1_agreement = point.top1,
                .top1_agreement_bound = point.top1,
                .kl_mean = point.kl,
                .kl_mean_bound = point.kl};
  if (docs.size() < 2 || resamples == 0) return w;
  std::vector<double> ppl(resamples), top1(resamples), kl(resamples);
  SplitMix64 rng(0x6B76636F64656320ull ^ docs.size());
  for (uint32_t b = 0; b < resamples; ++b) {
    DocumentSums s;
    for (size_t i = 0; i < docs.size(); ++i) Accumulate(s, docs[rng.Next() % docs.size()]);
    const Figures f = FiguresOf(s);
    ppl[b] = f.ppl_delta_pct;
    top1[b] = f.top1;
    kl[b] = f.kl;
  }
  std::sort(ppl.begin(), ppl.end());
  std::sort(top1.begin(), top1.end());
  std::sort(kl.begin(), kl.end());
  // The resample at `confidence` from the bad end: at most 1 - confidence of them are worse.
  const auto upper = std::min<size_t>(resamples - 1, static_cast<size_t>(std::ceil(confidence * resamples - 1e-9)) - 1);
  const auto lower = resamples - 1 - upper;
  // The point figure is kept as a bound where resampling lands on the good side of it (a
  // skewed sample): a bound never promises more than was measured.
  w.ppl_delta_pct_bound = std::max(ppl[upper], point.ppl_delta_pct);
  w.top1_agreement_bound = std::min(top1[lower], point.top1);
  w.kl_mean_bound = std::max(kl[upper], point.kl);
  return w;
}

}  // namespace kvc
