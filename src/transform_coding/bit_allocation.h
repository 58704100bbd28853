// Bit allocation for transform coding: which width (0..8 bits) each component group gets so
// that the total error is least within a bit budget per token. A multiple-choice knapsack,
// solved exactly by dynamic programming over (group, bits used).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace kvc {

struct AllocationGroup {
  uint32_t n_components = 0;      // group size: costs b * n_components bits per token, + scale_bits if b > 0
  std::array<double, 9> error{};  // weighted squared error per token at b = 0..8
};

// Bits per token of an allocation: sum over groups of b * n_components + (b > 0 ? scale_bits : 0).
uint64_t AllocationCost(std::span<const AllocationGroup> groups, std::span<const uint8_t> bits,
                        uint32_t scale_bits = 16);
// Sum over groups of error[b].
double AllocationError(std::span<const AllocationGroup> groups, std::span<const uint8_t> bits);

// Chooses b in 0..8 per group minimising the summed error subject to
// AllocationCost(groups, result, scale_bits) <= budget_bits. Ties go to fewer bits: per group
// the smallest width among equally good ones, overall the cheapest of equally good totals.
//
// The DP runs in cost units of `granularity_bits`. Costs are rounded up to whole units and the
// budget down, so the DP's plan always fits the budget, and it is exactly optimal whenever
// every option's cost is a multiple of the unit. When some cost is not, the rounding can leave
// up to (unit - 1) bits per group unspent; a greedy pass then upgrades groups by most error
// saved per bit while the real budget allows (near-optimal, still within budget).
//   granularity_bits == 0 (automatic): the gcd of all option costs, which is exact; coarsened
//   to a multiple of it only if the table would otherwise exceed 2^18 budget states or 64 MiB
//   of choices (e.g. 200 groups with odd costs and a budget above ~320,000 bits).
// The error is non-increasing in budget_bits whenever the DP is exact (always when the
// automatic unit is the gcd).
// Cost O(groups * budget_bits / unit * 9) time and groups * budget_bits / unit bytes.
// Errors (kInvalidArgument): a group with n_components == 0, or an error that is negative, inf
// or NaN. No groups gives an empty allocation.
[[nodiscard]] Result<std::vector<uint8_t>> AllocateBits(std::span<const AllocationGroup> groups, uint64_t budget_bits,
                                                        uint32_t scale_bits = 16, uint64_t granularity_bits = 0);

// A group whose cost at each width is a measured rate (bits per token, fractional: an entropy
// coder's) rather than b * n_components + a scale.
struct RateGroup {
  std::array<double, 9> rate{};   // bits per token at b = 0..8 (rate[0] is normally 0)
  std::array<double, 9> error{};  // weighted squared error per token at b = 0..8
};

// Chooses b in 0..8 per group, greedily by error saved per bit along each group's lower convex
// hull of (rate, error), while the summed rate stays within budget_bits; when the best next
// step does not fit, smaller steps of other groups that do are still taken. Optimal for the
// convexified problem up to the last step. Errors and rates must be finite and >= 0
// (kInvalidArgument otherwise).
[[nodiscard]] Result<std::vector<uint8_t>> AllocateBitsByRate(std::span<const RateGroup> groups, double budget_bits);

}  // namespace kvc
