#include "base/vector_isa.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvc {
namespace {

TEST(VectorIsa, AutoResolvesToTheWidestSupportedSet) {
  const VectorIsa best = BestVectorIsa();
  ::testing::Test::RecordProperty("best", VectorIsaName(best));
  EXPECT_NE(best, VectorIsa::kAuto);
  EXPECT_TRUE(VectorIsaSupported(best));
  EXPECT_EQ(ResolveVectorIsa(VectorIsa::kAuto), best);
  EXPECT_TRUE(VectorIsaSupported(VectorIsa::kPortable));
  EXPECT_EQ(ResolveVectorIsa(VectorIsa::kPortable), VectorIsa::kPortable);
  // The sets nest: a CPU with AVX-512 runs the AVX2 paths too, and nothing wider than best.
  if (VectorIsaSupported(VectorIsa::kAvx512)) {
    EXPECT_TRUE(VectorIsaSupported(VectorIsa::kAvx2));
  }
  if (best == VectorIsa::kAvx2) {
    EXPECT_FALSE(VectorIsaSupported(VectorIsa::kAvx512));
  }
  if (best == VectorIsa::kPortable) {
    EXPECT_FALSE(VectorIsaSupported(VectorIsa::kAvx2));
  }
}

TEST(VectorIsa, AnUnsupportedRequestRunsAsAuto) {
  for (const VectorIsa isa : {VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    EXPECT_EQ(ResolveVectorIsa(isa), VectorIsaSupported(isa) ? isa : BestVectorIsa()) << VectorIsaName(isa);
  }
}

TEST(VectorIsa, SupportedSetsStartPortableAndEndWithTheBest) {
  const std::vector<VectorIsa> sets = SupportedVectorIsas();
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.front(), VectorIsa::kPortable);
  EXPECT_EQ(sets.back(), BestVectorIsa());
  for (const VectorIsa isa : sets) EXPECT_TRUE(VectorIsaSupported(isa)) << VectorIsaName(isa);
}

TEST(VectorIsa, Names) {
  EXPECT_EQ(std::string(VectorIsaName(VectorIsa::kAvx512)), "avx512");
  EXPECT_EQ(std::string(VectorIsaName(VectorIsa::kAvx2)), "avx2");
  EXPECT_EQ(std::string(VectorIsaName(VectorIsa::kPortable)), "portable");
  EXPECT_EQ(std::string(VectorIsaName(VectorIsa::kAuto)), "auto");
}

}  // namespace
}  // namespace kvc
