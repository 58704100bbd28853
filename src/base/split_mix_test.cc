#include "base/split_mix.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

// The reference sequence (Steele, Lea and Flood's splitmix64, as in Vigna's splitmix64.c) from
// seed 0: what every reproducible sequence built on it depends on.
TEST(SplitMix64, IsTheReferenceSequence) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.Next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.Next(), 0x06C45D188009454Full);
}

}  // namespace
}  // namespace kvc
