#include "transform_coding/bit_allocation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

namespace kvc {
namespace {

constexpr uint32_t kWidths = 9;  // b = 0..8
constexpr uint64_t kMaxStates = uint64_t{1} << 18;
constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;

uint64_t OptionCost(const AllocationGroup& g, uint32_t b, uint32_t scale_bits) {
  return b == 0 ? 0 : uint64_t{b} * g.n_components + scale_bits;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

}  // namespace

uint64_t AllocationCost(std::span<const AllocationGroup> groups, std::span<const uint8_t> bits, uint32_t scale_bits) {
  uint64_t total = 0;
  for (size_t g = 0; g < std::min(groups.size(), bits.size()); ++g) total += OptionCost(groups[g], bits[g], scale_bits);
  return total;
}

double AllocationError(std::span<const AllocationGroup> groups, std::span<const uint8_t> bits) {
  double total = 0;
  for (size_t g = 0; g < std::min(groups.size(), bits.size()); ++g) {
    total += groups[g].error[std::min<uint8_t>(bits[g], 8)];
  }
  return total;
}

Result<std::vector<uint8_t>> AllocateBits(std::span<const AllocationGroup> groups, uint64_t budget_bits,
                                          uint32_t scale_bits, uint64_t granularity_bits) {
  const size_t n_groups = groups.size();
  if (n_groups == 0) return std::vector<uint8_t>{};
  uint64_t max_total = 0;  // cost of 8 bits everywhere: no budget beyond it matters
  uint64_t gcd = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    if (groups[g].n_components == 0) return InvalidArgument(FormatMessage("allocation group %zu has no components", g));
    for (uint32_t b = 0; b < kWidths; ++b) {
      const double e = groups[g].error[b];
      if (!std::isfinite(e) || e < 0) {
        return InvalidArgument(FormatMessage("allocation group %zu: error at %u bits is %g", g, b, e));
      }
      gcd = std::gcd(gcd, OptionCost(groups[g], b, scale_bits));
    }
    max_total += OptionCost(groups[g], kWidths - 1, scale_bits);
  }
  const uint64_t cap_bits = std::min(budget_bits, max_total);

  uint64_t unit = granularity_bits;
  if (unit == 0) {
    unit = gcd;
    const uint64_t max_states = std::max<uint64_t>(1, std::min(kMaxStates, kMaxTableBytes / n_groups));
    const uint64_t states = cap_bits / unit + 1;
    if (states > max_states) unit *= CeilDiv(states, max_states);
  }

  // Per option, its cost in units rounded up: the rounding can only overestimate, so a plan
  // within budget / unit units is within budget_bits.
  std::vector<std::array<uint64_t, kWidths>> cost(n_groups);
  uint64_t reach = 0;  // sum of the largest option costs, in units
  for (size_t g = 0; g < n_groups; ++g) {
    for (uint32_t b = 0; b < kWidths; ++b) cost[g][b] = CeilDiv(OptionCost(groups[g], b, scale_bits), unit);
    reach += cost[g][kWidths - 1];
  }
  const size_t n_states = static_cast<size_t>(std::min(budget_bits / unit, reach)) + 1;

  // best[c]: least error of the groups so far with cost exactly c units (inf: unreachable).
  // Exact cost rather than "at most c" lets the final scan pick the cheapest optimum.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> best(n_states, kInf);
  std::vector<double> next(n_states);
  std::vector<uint8_t> choice(n_groups * n_states);
  best[0] = 0.0;
  size_t hi = 0;  // highest reachable cost so far
  for (size_t g = 0; g < n_groups; ++g) {
    const size_t new_hi = static_cast<size_t>(std::min<uint64_t>(n_states - 1, hi + cost[g][kWidths - 1]));
    std::fill(next.begin(), next.begin() + static_cast<ptrdiff_t>(new_hi) + 1, kInf);
    uint8_t* ch = choice.data() + g * n_states;
    // Widths ascending with a strict compare: among equal errors the narrower width stays.
    for (uint32_t b = 0; b < kWidths; ++b) {
      const uint64_t cb = cost[g][b];
      if (cb > new_hi) continue;
      const size_t lo = static_cast<size_t>(cb);
      const size_t end = std::min<size_t>(new_hi, hi + lo);
      const double e = groups[g].error[b];
      const uint8_t width = static_cast<uint8_t>(b);
      for (size_t c = lo; c <= end; ++c) {
        const double v = best[c - lo] + e;
        const bool better = v < next[c];
        next[c] = better ? v : next[c];
        ch[c] = better ? width : ch[c];
      }
    }
    best.swap(next);
    hi = new_hi;
  }

  size_t at = 0;
  for (size_t c = 1; c <= hi; ++c) {
    if (best[c] < best[at]) at = c;
  }
  std::vector<uint8_t> bits(n_groups);
  for (size_t g = n_groups; g-- > 0;) {
    const uint8_t b = choice[g * n_states + at];
    bits[g] = b;
    at -= static_cast<size_t>(cost[g][b]);
  }
  uint64_t used = AllocationCost(groups, bits, scale_bits);
  if (used > budget_bits) return Internal("bit allocation exceeded its budget");

  // Rounding costs up to coarse units leaves up to (unit - 1) bits per group unspent; hand them
  // out greedily by error saved per bit. An exact DP leaves no affordable improvement, so this
  // only runs when the rounding was lossy.
  bool lossy = false;
  for (size_t g = 0; g < n_groups; ++g) {
    for (uint32_t b = 1; b < kWidths; ++b) lossy |= OptionCost(groups[g], b, scale_bits) % unit != 0;
  }
  while (lossy) {
    double best_gain = 0;
    size_t best_g = n_groups;
    uint8_t best_b = 0;
    for (size_t g = 0; g < n_groups; ++g) {
      const uint64_t now = OptionCost(groups[g], bits[g], scale_bits);
      for (uint32_t b = bits[g] + 1u; b < kWidths; ++b) {
        const uint64_t extra = OptionCost(groups[g], b, scale_bits) - now;
        const double saved = groups[g].error[bits[g]] - groups[g].error[b];
        if (extra > budget_bits - used || saved <= 0) continue;
        const double gain = saved / static_cast<double>(extra);
        if (gain > best_gain) {
          best_gain = gain;
          best_g = g;
          best_b = static_cast<uint8_t>(b);
        }
      }
    }
    if (best_g == n_groups) break;
    used += OptionCost(groups[best_g], best_b, scale_bits) - OptionCost(groups[best_g], bits[best_g], scale_bits);
    bits[best_g] = best_b;
  }
  return bits;
}

Result<std::vector<uint8_t>> AllocateBitsByRate(std::span<const RateGroup> groups, double budget_bits) {
  const size_t n_groups = groups.size();
  // Per group, the widths on its lower convex hull, starting at 0 bits: from each hull point the
  // next is the width with the steepest error drop per extra bit.
  std::vector<std::vector<uint8_t>> hull(n_groups);
  for (size_t g = 0; g < n_groups; ++g) {
    for (uint32_t b = 0; b < kWidths; ++b) {
      const double r = groups[g].rate[b], e = groups[g].error[b];
      if (!std::isfinite(r) || r < 0 || !std::isfinite(e) || e < 0) {
        return InvalidArgument(FormatMessage("rate group %zu: rate %g / error %g at %u bits", g, r, e, b));
      }
    }
    std::vector<uint8_t>& h = hull[g];
    h.push_back(0);
    for (;;) {
      const uint8_t at = h.back();
      double best_slope = 0;
      uint8_t best = at;
      for (uint32_t b = at + 1u; b < kWidths; ++b) {
        const double dr = groups[g].rate[b] - groups[g].rate[at];
        const double de = groups[g].error[at] - groups[g].error[b];
        if (de <= 0) continue;
        const double slope = dr <= 0 ? std::numeric_limits<double>::infinity() : de / dr;
        if (slope > best_slope) {
          best_slope = slope;
          best = static_cast<uint8_t>(b);
        }
      }
      if (best == at) break;
      h.push_back(best);
    }
  }
  // Max-heap of (slope of the group's next hull step, group).
  std::vector<uint8_t> bits(n_groups, 0);
  std::vector<size_t> at(n_groups, 0);
  using Step = std::pair<double, size_t>;
  std::priority_queue<Step> next;
  auto push = [&](size_t g) {
    if (at[g] + 1 >= hull[g].size()) return;
    const uint8_t from = hull[g][at[g]], to = hull[g][at[g] + 1];
    const double dr = groups[g].rate[to] - groups[g].rate[from];
    const double de = groups[g].error[from] - groups[g].error[to];
    next.push({dr <= 0 ? std::numeric_limits<double>::infinity() : de / dr, g});
  };
  double used = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    used += groups[g].rate[0];
    push(g);
  }
  while (!next.empty()) {
    const size_t g = next.top().second;
    next.pop();
    const uint8_t from = hull[g][at[g]], to = hull[g][at[g] + 1];
    const double extra = groups[g].rate[to] - groups[g].rate[from];
    if (used + extra > budget_bits) continue;  // this group stops here; cheaper steps elsewhere may fit
    used += extra;
    bits[g] = to;
    ++at[g];
    push(g);
  }
  return bits;
}

}  // namespace kvc
