#include "transform_coding/bit_allocation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvc {
namespace {

// Error of a Gaussian group with variance `var` per component: roughly var * 4^-b per
// component (high-rate approximation), var when dropped.
AllocationGroup GaussianGroup(uint32_t n, double var) {
  AllocationGroup g;
  g.n_components = n;
  for (uint32_t b = 0; b <= 8; ++b) g.error[b] = n * var * (b == 0 ? 1.0 : 1.2 * std::pow(4.0, -double(b)));
  return g;
}

struct BruteResult {
  double error = std::numeric_limits<double>::infinity();
};

void Brute(std::span<const AllocationGroup> groups, uint64_t budget, uint32_t scale_bits, std::vector<uint8_t>& bits,
           size_t g, BruteResult* best) {
  if (g == groups.size()) {
    if (AllocationCost(groups, bits, scale_bits) <= budget) {
      best->error = std::min(best->error, AllocationError(groups, bits));
    }
    return;
  }
  for (uint8_t b = 0; b <= 8; ++b) {
    bits[g] = b;
    Brute(groups, budget, scale_bits, bits, g + 1, best);
  }
}

TEST(BitAllocation, MatchesBruteForce) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> n_groups(1, 6), size(1, 20), scale(0, 20);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int rep = 0; rep < 60; ++rep) {
    const uint32_t count = rep < 50 ? std::min(n_groups(rng), 5u) : 6;
    const uint32_t scale_bits = rep % 3 == 0 ? 16 : scale(rng);
    std::vector<AllocationGroup> groups(count);
    for (auto& g : groups) {
      g.n_components = size(rng);
      if (rep % 2 == 0) {
        for (double& e : g.error) e = uni(rng);  // arbitrary, not even monotone
      } else {
        g = GaussianGroup(g.n_components, 0.01 + 10 * uni(rng));
      }
    }
    const std::vector<uint8_t> all8(count, 8);
    const uint64_t max_cost = AllocationCost(groups, all8, scale_bits);
    const uint64_t budget = static_cast<uint64_t>(uni(rng) * 1.1 * max_cost);
    auto bits = AllocateBits(groups, budget, scale_bits);
    ASSERT_TRUE(bits.ok()) << bits.status().ToString();
    ASSERT_EQ(bits->size(), count);
    EXPECT_LE(AllocationCost(groups, *bits, scale_bits), budget);
    std::vector<uint8_t> scratch(count);
    BruteResult best;
    Brute(groups, budget, scale_bits, scratch, 0, &best);
    EXPECT_NEAR(AllocationError(groups, *bits), best.error, 1e-12) << "rep " << rep;
  }
}

TEST(BitAllocation, SpendsTheBudgetExactly) {
  const std::vector<AllocationGroup> one = {GaussianGroup(16, 1.0)};
  // 4 bits cost 4 * 16 + 16 = 80 bits.
  EXPECT_EQ((*AllocateBits(one, 80))[0], 4);
  EXPECT_EQ((*AllocateBits(one, 79))[0], 3);
  EXPECT_EQ((*AllocateBits(one, 31))[0], 0);
  EXPECT_EQ((*AllocateBits(one, 32))[0], 1);
  EXPECT_EQ((*AllocateBits(one, 1000000))[0], 8);
  EXPECT_EQ((*AllocateBits(one, 80, 0))[0], 5);
}

TEST(BitAllocation, MonotoneInBudget) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> var(0.01, 100.0);
  std::vector<AllocationGroup> groups;
  groups.reserve(20);
  for (int g = 0; g < 20; ++g) groups.push_back(GaussianGroup(g == 19 ? 7 : 16, var(rng)));
  double last = std::numeric_limits<double>::infinity();
  for (uint64_t budget = 0; budget <= 3000; budget += 7) {
    auto bits = AllocateBits(groups, budget);
    ASSERT_TRUE(bits.ok());
    ASSERT_LE(AllocationCost(groups, *bits), budget);
    const double e = AllocationError(groups, *bits);
    ASSERT_LE(e, last) << budget;
    last = e;
  }
}

TEST(BitAllocation, PrefersHighVarianceGroups) {
  std::vector<AllocationGroup> groups = {GaussianGroup(16, 1.0), GaussianGroup(16, 100.0), GaussianGroup(16, 0.01)};
  for (uint64_t budget : {48u, 100u, 200u, 300u}) {
    auto bits = AllocateBits(groups, budget);
    ASSERT_TRUE(bits.ok());
    EXPECT_GE((*bits)[1], (*bits)[0]) << budget;
    EXPECT_GE((*bits)[0], (*bits)[2]) << budget;
    EXPECT_GT((*bits)[1], 0) << budget;
  }
  // Log2(100) / 2 ~ 3.3 bits more for the 100x variance once every group is coded.
  auto bits = AllocateBits(groups, 3 * 16 + 16 * (2 + 5 + 8));
  ASSERT_TRUE(bits.ok());
  EXPECT_GE((*bits)[1] - (*bits)[0], 3);
}

TEST(BitAllocation, TiesPreferFewerBits) {
  AllocationGroup flat;
  flat.n_components = 4;
  flat.error.fill(2.0);
  const std::vector<AllocationGroup> groups(3, flat);
  auto bits = AllocateBits(groups, 10000);
  ASSERT_TRUE(bits.ok());
  for (uint8_t b : *bits) EXPECT_EQ(b, 0);

  // Equal error at 3..8 bits: 3 bits, whatever the budget.
  AllocationGroup plateau = GaussianGroup(8, 1.0);
  for (int b = 4; b <= 8; ++b) plateau.error[b] = plateau.error[3];
  const std::vector<AllocationGroup> one = {plateau};
  EXPECT_EQ((*AllocateBits(one, 10000))[0], 3);
}

TEST(BitAllocation, GranularityKeepsWithinBudget) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> var(0.01, 100.0);
  std::uniform_int_distribution<uint32_t> size(3, 19);
  std::vector<AllocationGroup> groups;
  groups.reserve(30);
  for (int g = 0; g < 30; ++g) groups.push_back(GaussianGroup(size(rng), var(rng)));
  for (uint64_t budget : {0u, 50u, 777u, 2000u, 4321u}) {
    auto exact = AllocateBits(groups, budget, 16, 1);
    ASSERT_TRUE(exact.ok());
    for (uint64_t unit : {2u, 8u, 64u, 10000u}) {
      auto coarse = AllocateBits(groups, budget, 16, unit);
      ASSERT_TRUE(coarse.ok());
      EXPECT_LE(AllocationCost(groups, *coarse), budget) << unit;
      EXPECT_GE(AllocationError(groups, *coarse), AllocationError(groups, *exact) - 1e-12) << unit;
      if (unit <= 8) {  // the greedy top-up recovers what the rounding lost
        EXPECT_LE(AllocationError(groups, *coarse), 1.05 * AllocationError(groups, *exact)) << unit;
      }
    }
  }
}

TEST(BitAllocation, LargeProblem) {
  // 200 groups of odd sizes (gcd 1) and a 150,000-bit budget: the exact table fits (30 MB).
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> var(0.001, 10.0);
  std::vector<AllocationGroup> groups;
  groups.reserve(200);
  for (int g = 0; g < 200; ++g) groups.push_back(GaussianGroup(g % 2 ? 125 : 123, var(rng)));
  auto bits = AllocateBits(groups, 150000);
  ASSERT_TRUE(bits.ok());
  const uint64_t cost = AllocationCost(groups, *bits);
  EXPECT_LE(cost, 150000u);
  EXPECT_GT(cost, 150000u - 200u);  // nearly every bit used: more bits always help here
}

TEST(BitAllocation, AutomaticCoarseningStaysWithinBudget) {
  // 2000 groups with gcd 1 and a budget far above 2^18 units: coarsened automatically.
  std::vector<AllocationGroup> groups;
  groups.reserve(2000);
  for (int g = 0; g < 2000; ++g) groups.push_back(GaussianGroup(127 + g % 3, 1.0 + g % 17));
  auto bits = AllocateBits(groups, 1500000);
  ASSERT_TRUE(bits.ok());
  const uint64_t cost = AllocationCost(groups, *bits);
  EXPECT_LE(cost, 1500000u);
  EXPECT_GT(cost, 1500000u * 99 / 100);
}

TEST(BitAllocation, InvalidInputs) {
  EXPECT_TRUE(AllocateBits({}, 100)->empty());
  std::vector<AllocationGroup> groups = {GaussianGroup(16, 1.0)};
  groups[0].n_components = 0;
  EXPECT_EQ(AllocateBits(groups, 100).status().code(), StatusCode::kInvalidArgument);
  groups = {GaussianGroup(16, 1.0)};
  groups[0].error[3] = -1.0;
  EXPECT_EQ(AllocateBits(groups, 100).status().code(), StatusCode::kInvalidArgument);
  groups[0].error[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(AllocateBits(groups, 100).status().code(), StatusCode::kInvalidArgument);
  groups[0].error[3] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(AllocateBits(groups, 100).status().code(), StatusCode::kInvalidArgument);
}

// Rate groups of one component each, rate b bits at width b and Gaussian error
// variance * 2^(-2b): convex, so greedy along the hull is optimal at the hull's vertices.
std::vector<RateGroup> GaussianRateGroups(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.01, 10.0);
  std::vector<RateGroup> groups(n);
  for (RateGroup& g : groups) {
    const double variance = u(rng);
    for (uint32_t b = 0; b <= 8; ++b) {
      g.rate[b] = b;
      g.error[b] = variance * std::pow(2.0, -2.0 * b);
    }
  }
  return groups;
}

double RateOf(const std::vector<RateGroup>& groups, const std::vector<uint8_t>& bits) {
  double r = 0;
  for (size_t g = 0; g < groups.size(); ++g) r += groups[g].rate[bits[g]];
  return r;
}

double ErrorOf(const std::vector<RateGroup>& groups, const std::vector<uint8_t>& bits) {
  double e = 0;
  for (size_t g = 0; g < groups.size(); ++g) e += groups[g].error[bits[g]];
  return e;
}

TEST(BitAllocationByRate, MatchesTheExactDpOnConvexGroups) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const std::vector<RateGroup> groups = GaussianRateGroups(40, seed);
    std::vector<AllocationGroup> same(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      same[g].n_components = 1;
      same[g].error = groups[g].error;
    }
    for (double budget : {0.0, 7.0, 40.0, 100.0, 200.0, 320.0, 1000.0}) {
      auto greedy = AllocateBitsByRate(groups, budget);
      ASSERT_TRUE(greedy.ok());
      EXPECT_LE(RateOf(groups, *greedy), budget);
      auto exact = AllocateBits(same, static_cast<uint64_t>(budget), 0);
      ASSERT_TRUE(exact.ok());
      // Integer rates on convex curves: the greedy plan is the optimum.
      EXPECT_NEAR(ErrorOf(groups, *greedy), ErrorOf(groups, *exact), 1e-9 * (1 + ErrorOf(groups, *exact)))
          << "seed " << seed << " budget " << budget;
    }
  }
}

TEST(BitAllocationByRate, SkipsWidthsOffTheHullAndSpendsWhatFits) {
  // Group 0: 1 and 2 bits barely help, 3 bits helps a lot: the hull jumps 0 -> 3.
  RateGroup jump;
  jump.rate = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  jump.error = {10, 9.9, 9.8, 1, 0.5, 0.25, 0.125, 0.06, 0.03};
  // Group 1: a steady decline.
  RateGroup steady;
  steady.rate = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  steady.error = {4, 2, 1, 0.5, 0.25, 0.125, 0.06, 0.03, 0.015};
  const std::vector<RateGroup> groups = {jump, steady};
  auto bits = AllocateBitsByRate(groups, 3);
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ((*bits)[0], 3);  // slope 3 per bit beats the steady group's 2
  EXPECT_EQ((*bits)[1], 0);
  bits = AllocateBitsByRate(groups, 4);
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ((*bits)[0], 3);
  EXPECT_EQ((*bits)[1], 1);
  // A budget too small for the jump still buys the steady group's steps.
  bits = AllocateBitsByRate(groups, 2);
  ASSERT_TRUE(bits.ok());
  EXPECT_EQ((*bits)[0], 0);
  EXPECT_EQ((*bits)[1], 2);
}

TEST(BitAllocationByRate, FractionalRatesAndInvalidInputs) {
  RateGroup g;
  g.rate = {0, 0.3, 1.1, 2.05, 3.0, 4.0, 5.0, 6.0, 7.0};
  g.error = {1, 0.4, 0.12, 0.03, 0.008, 0.002, 0.0005, 0.0001, 0.00003};
  auto bits = AllocateBitsByRate(std::vector<RateGroup>{g, g}, 2.2);
  ASSERT_TRUE(bits.ok());
  EXPECT_LE(g.rate[(*bits)[0]] + g.rate[(*bits)[1]], 2.2);
  EXPECT_EQ((*bits)[0] + (*bits)[1], 4);  // 1.1 + 1.1: two 2-bit widths
  EXPECT_TRUE(AllocateBitsByRate({}, 10)->empty());
  g.error[2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(AllocateBitsByRate(std::vector<RateGroup>{g}, 10).status().code(), StatusCode::kInvalidArgument);
  g.error[2] = 0.12;
  g.rate[4] = -1;
  EXPECT_EQ(AllocateBitsByRate(std::vector<RateGroup>{g}, 10).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvc
