// CacheGen's split of a stored run between the two ways to get its KV: the engine prefills the
// run's first chunks from their tokens while the chunks after them cross the link, so on a slow
// link neither waits for the other. Prefilling chunk i costs the same whatever the link (more for
// a later chunk, which attends to more: prefill_cost.h); fetching it costs its bytes over the
// bandwidth (or its decode); the split that finishes first is the one where the two sides take
// about as long.
#pragma once

#include <cstdint>
#include <span>

namespace kvc {

struct PrefillSplit {
  uint32_t prefilled_chunks = 0;  // chunks 0 .. prefilled_chunks - 1 are prefilled, the rest fetched
  double predicted_s = 0;         // the slower of the two sides
};

// A gain smaller than this share of the all-fetched time is not worth a split: joining the two
// sides copies the prefilled KV once more, and the predictions are guesses.
inline constexpr double kMinSplitGain = 0.1;

// `fetch_s[i]`: predicted seconds to fetch chunk i of the run (the last may be a tail, which is
// always fetched: only whole chunks may be prefilled); `prefilled_s[k - 1]`: seconds to prefill
// the run's first k chunks here (PrefillCost::Prefix), one entry per chunk that may be
// prefilled. The split whose slower side finishes first, ties to fewer prefilled chunks; no split
// (0) unless it beats fetching everything by kMinSplitGain. A prediction that is not finite (no
// variant to fetch) counts as never arriving; a price that is not a positive finite number ends
// the chunks that may be prefilled.
PrefillSplit ChoosePrefillSplit(std::span<const double> fetch_s, std::span<const double> prefilled_s);

}  // namespace kvc
