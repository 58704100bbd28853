#include "base/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace kvc {
namespace {

// Bit-at-a-time reference, independent of the table code under test.
uint32_t ReferenceCrc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

TEST(Crc32cTest, CheckValue) { EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u); }

// Vectors from RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0x00);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::vector<uint8_t> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<uint8_t> inc(32);
  for (size_t i = 0; i < inc.size(); ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  std::vector<uint8_t> dec(32);
  for (size_t i = 0; i < dec.size(); ++i) dec[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(dec.data(), dec.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, EmptyInput) {
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32cExtend(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32cTest, ExtendInPiecesEqualsWhole) {
  const char* text = "The quick brown fox jumps over the lazy dog, 0123456789 times.";
  const size_t n = std::strlen(text);
  const uint32_t whole = Crc32c(text, n);
  for (size_t split = 0; split <= n; ++split) {
    const uint32_t first = Crc32c(text, split);
    EXPECT_EQ(Crc32cExtend(first, text + split, n - split), whole) << "split at " << split;
  }
  uint32_t running = 0;
  for (size_t i = 0; i < n; ++i) running = Crc32cExtend(running, text + i, 1);
  EXPECT_EQ(running, whole);
}

TEST(Crc32cTest, MatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  std::mt19937 rng(1234);
  std::vector<uint8_t> buf(300);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t len = 0; offset + len <= buf.size(); ++len) {
      const uint32_t expected = ReferenceCrc32c(buf.data() + offset, len);
      ASSERT_EQ(Crc32c(buf.data() + offset, len), expected) << "offset " << offset << " len " << len;
      // The table loop too, which the hardware path replaces on most CPUs.
      ASSERT_EQ(Crc32cExtendPortable(0, buf.data() + offset, len), expected) << "offset " << offset << " len " << len;
    }
  }
}

}  // namespace
}  // namespace kvc
