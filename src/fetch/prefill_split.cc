#include "fetch/prefill_split.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kvc {

PrefillSplit ChoosePrefillSplit(std::span<const double> fetch_s, std::span<const double> prefilled_s) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // fetched[k]: seconds to fetch chunks k.. of the run.
  std::vector<double> fetched(fetch_s.size() + 1, 0.0);
  for (size_t i = fetch_s.size(); i-- > 0;) {
    const double s = fetch_s[i];
    fetched[i] = fetched[i + 1] + (std::isfinite(s) && s >= 0 ? s : kNever);
  }
  const PrefillSplit all_fetched{0, fetched[0]};
  PrefillSplit best = all_fetched;
  const uint32_t most = static_cast<uint32_t>(std::min(prefilled_s.size(), fetch_s.size()));
  for (uint32_t k = 1; k <= most; ++k) {
    const double prefill = prefilled_s[k - 1];
    if (!(prefill > 0) || !std::isfinite(prefill)) break;
    const double t = std::max(prefill, fetched[k]);
    if (t < best.predicted_s) best = {k, t};
  }
  if (best.prefilled_chunks > 0 && best.predicted_s > all_fetched.predicted_s * (1 - kMinSplitGain)) {
    return all_fetched;
  }
  return best;
}

}  // namespace kvc
