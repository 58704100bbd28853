#include "base/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace kvc {
namespace {

TEST(Hash, Xxh3_128KnownValue) {
  // Reference digest of the empty input from the xxHash test vectors.
  EXPECT_EQ(HexString(Xxh3_128("", 0)), "99aa06d3014798d86001c324468d497f");
}

TEST(Hash, IncrementalEqualsOneShot) {
  const std::string text = "tokens of chunk one, then tokens of chunk two";
  Xxh3Hasher h;
  h.Update(text.data(), 10);
  h.Update(text.data() + 10, text.size() - 10);
  EXPECT_EQ(h.Digest(), Xxh3_128(text.data(), text.size()));
  EXPECT_NE(Xxh3_128("a", 1), Xxh3_128("b", 1));
}

}  // namespace
}  // namespace kvc
