#include "entropy/block.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "entropy/entropy_test_data.h"
#include "entropy/varint.h"

namespace kvc {
namespace {

using testing::LaplacianBytes;
using testing::PackedNibbles;
using testing::UniformBytes;

constexpr EntropyMethod kMethods[] = {EntropyMethod::kStored, EntropyMethod::kDeflate, EntropyMethod::kRans};

size_t StoredSize(size_t n) { return 1 + VarintSize(n) + n; }

std::vector<uint8_t> RoundTrip(std::span<const uint8_t> data, EntropyMethod method, int level = 6) {
  auto block = EncodeBlock(data, method, level);
  EXPECT_TRUE(block.ok()) << block.status().ToString();
  if (!block.ok()) return {};
  EXPECT_LE(block->size(), StoredSize(data.size()));
  auto back = DecodeBlock(*block, data.size());
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  if (back.ok()) {
    EXPECT_TRUE(std::equal(back->begin(), back->end(), data.begin(), data.end()));
  }
  std::vector<uint8_t> into(data.size());
  EXPECT_TRUE(DecodeBlockInto(*block, into).ok());
  EXPECT_TRUE(std::equal(into.begin(), into.end(), data.begin(), data.end()));
  return *block;
}

TEST(Block, EmptyAndTinyInputsAreStored) {
  for (EntropyMethod m : kMethods) {
    EXPECT_EQ(RoundTrip({}, m), (std::vector<uint8_t>{0, 0}));
    const uint8_t one[] = {0x5a};
    EXPECT_EQ(RoundTrip(one, m), (std::vector<uint8_t>{0, 1, 0x5a}));
  }
}

TEST(Block, MatchesTheDocumentedExample) {
  // docs/format.md, "Entropy block".
  const uint8_t data[] = {1, 2, 3};
  EXPECT_EQ(RoundTrip(data, EntropyMethod::kStored), (std::vector<uint8_t>{0, 3, 1, 2, 3}));
}

TEST(Block, AllEqualBytesShrinkToAFewBytes) {
  const std::vector<uint8_t> data(1 << 20, 0x33);
  const auto rans = RoundTrip(data, EntropyMethod::kRans);
  EXPECT_EQ(BlockMethod(rans).value(), EntropyMethod::kRans);
  EXPECT_LT(rans.size(), 32u);
  const auto deflate = RoundTrip(data, EntropyMethod::kDeflate);
  EXPECT_EQ(BlockMethod(deflate).value(), EntropyMethod::kDeflate);
  EXPECT_LT(deflate.size(), 2000u);
}

TEST(Block, UniformRandomBytesFallBackToStored) {
  for (size_t n : {2, 10, 1000, 100000}) {
    const std::vector<uint8_t> data = UniformBytes(n, n);
    for (EntropyMethod m : kMethods) {
      for (int level : {1, 6, 12}) {
        const auto block = RoundTrip(data, m, level);
        EXPECT_EQ(BlockMethod(block).value(), EntropyMethod::kStored);
        EXPECT_EQ(block.size(), StoredSize(n));
        EXPECT_LE(block.size(), n + kMaxBlockHeaderBytes);
      }
    }
  }
}

TEST(Block, SkewedDataCompresses) {
  const std::vector<uint8_t> laplacian = LaplacianBytes(1 << 20, 1.5, 7);
  const std::vector<uint8_t> nibbles = PackedNibbles(1 << 20, 1.0, 8);
  for (const auto* data : {&laplacian, &nibbles}) {
    const double entropy = testing::Order0EntropyBytes(*data);
    const auto rans = RoundTrip(*data, EntropyMethod::kRans);
    const auto d1 = RoundTrip(*data, EntropyMethod::kDeflate, 1);
    const auto d6 = RoundTrip(*data, EntropyMethod::kDeflate, 6);
    EXPECT_EQ(BlockMethod(rans).value(), EntropyMethod::kRans);
    EXPECT_EQ(BlockMethod(d6).value(), EntropyMethod::kDeflate);
    std::printf("%s 1 MiB: order-0 entropy %.0f B, rANS %zu B (%+.2f%%), DEFLATE-1 %zu B, DEFLATE-6 %zu B\n",
                data == &laplacian ? "laplacian bytes" : "packed nibbles", entropy, rans.size(),
                100 * (rans.size() / entropy - 1), d1.size(), d6.size());
    EXPECT_LT(static_cast<double>(rans.size()), entropy * 1.01);
  }
}

TEST(Block, SmallSkewedBlocks) {
  for (size_t n : {2, 3, 16, 100, 257, 4096, 70000}) {
    const std::vector<uint8_t> data = LaplacianBytes(n, 0.8, n);
    for (EntropyMethod m : kMethods) RoundTrip(data, m);
  }
}

TEST(Block, Deterministic) {
  const std::vector<uint8_t> data = LaplacianBytes(300000, 2.0, 9);
  for (EntropyMethod m : kMethods) {
    EXPECT_EQ(EncodeBlock(data, m).value(), EncodeBlock(data, m).value());
  }
}

TEST(Block, RejectsBadArguments) {
  const uint8_t b[] = {1, 2, 3};
  EXPECT_EQ(EncodeBlock(b, static_cast<EntropyMethod>(3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeBlock(b, EntropyMethod::kDeflate, 13).status().code(), StatusCode::kInvalidArgument);
}

TEST(Block, DeclaredSizeIsCheckedBeforeAllocating) {
  // Stored, declaring 2^60 bytes: must fail on the limit, not try to allocate.
  const std::vector<uint8_t> huge = {0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10};
  auto r = DecodeBlock(huge, 1 << 20);
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("limit"), std::string::npos) << r.status().message();
  const std::vector<uint8_t> over = {2, 0x81, 0x80, 0x40};  // 2^20 + 1
  EXPECT_EQ(DecodeBlock(over, 1 << 20).status().code(), StatusCode::kCorrupt);

  const std::vector<uint8_t> block = EncodeBlock(LaplacianBytes(1000, 1.5, 1), EntropyMethod::kRans).value();
  EXPECT_EQ(DecodeBlock(block, 999).status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(DecodeBlock(block, 1000).ok());
  std::vector<uint8_t> wrong(999);
  EXPECT_EQ(DecodeBlockInto(block, wrong).code(), StatusCode::kCorrupt);
  wrong.resize(1001);
  EXPECT_EQ(DecodeBlockInto(block, wrong).code(), StatusCode::kCorrupt);
}

TEST(Block, MalformedHeadersAndPayloads) {
  EXPECT_EQ(DecodeBlock({}, 100).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(BlockMethod({}).status().code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> unknown = {3, 0};
  EXPECT_EQ(DecodeBlock(unknown, 100).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(BlockMethod(unknown).status().code(), StatusCode::kUnsupported);
  const std::vector<uint8_t> stored_short = {0, 3, 1, 2};
  EXPECT_EQ(DecodeBlock(stored_short, 100).status().code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> stored_long = {0, 1, 1, 2};
  EXPECT_EQ(DecodeBlock(stored_long, 100).status().code(), StatusCode::kCorrupt);
  const std::vector<uint8_t> non_canonical = {0, 0x81, 0x00, 1};
  EXPECT_EQ(DecodeBlock(non_canonical, 100).status().code(), StatusCode::kCorrupt);

  std::vector<uint8_t> deflate = EncodeBlock(LaplacianBytes(5000, 1.5, 2), EntropyMethod::kDeflate).value();
  ASSERT_EQ(BlockMethod(deflate).value(), EntropyMethod::kDeflate);
  deflate.push_back(0);
  EXPECT_EQ(DecodeBlock(deflate, 1 << 20).status().code(), StatusCode::kCorrupt);
  std::vector<uint8_t> rans = EncodeBlock(LaplacianBytes(5000, 1.5, 2), EntropyMethod::kRans).value();
  ASSERT_EQ(BlockMethod(rans).value(), EntropyMethod::kRans);
  rans.push_back(0);
  rans.push_back(0);
  EXPECT_EQ(DecodeBlock(rans, 1 << 20).status().code(), StatusCode::kCorrupt);
}

TEST(Block, RansTableOverAByteAlphabetIsRejected) {
  // A valid 257-symbol table is not a byte table.
  ByteWriter w;
  w.U8(2);
  PutVarint(&w, 1);
  PutVarint(&w, 257);
  w.U8(10);
  PutVarint(&w, 1024);
  PutVarint(&w, 0);
  PutVarint(&w, 255);
  for (int i = 0; i < 8; ++i) w.U8(i == 2 || i == 6 ? 1 : 0);
  EXPECT_EQ(DecodeBlock(w.bytes(), 100).status().code(), StatusCode::kCorrupt);
}

// Every strict prefix of a non-empty block must fail cleanly (the exact-size copy lets ASan
// see any read past the end).
TEST(Block, EveryTruncationFails) {
  const std::vector<uint8_t> data = LaplacianBytes(600, 1.0, 3);
  for (EntropyMethod m : kMethods) {
    const std::vector<uint8_t> block = EncodeBlock(data, m).value();
    ASSERT_EQ(BlockMethod(block).value(), m);
    for (size_t n = 0; n < block.size(); ++n) {
      const std::vector<uint8_t> cut(block.begin(), block.begin() + n);
      EXPECT_FALSE(DecodeBlock(cut, 1 << 20).ok()) << "method " << static_cast<int>(m) << " length " << n;
      std::vector<uint8_t> out(data.size());
      EXPECT_FALSE(DecodeBlockInto(cut, out).ok());
    }
  }
}

TEST(Block, SingleByteFlipsNeverCrash) {
  const std::vector<uint8_t> data = LaplacianBytes(400, 1.0, 4);
  for (EntropyMethod m : kMethods) {
    const std::vector<uint8_t> block = EncodeBlock(data, m).value();
    size_t accepted = 0;
    for (size_t i = 0; i < block.size(); ++i) {
      for (uint8_t mask : {0x01, 0x10, 0x80, 0xff}) {
        std::vector<uint8_t> bad = block;
        bad[i] ^= mask;
        auto r = DecodeBlock(bad, 1 << 20);
        if (r.ok()) {
          ++accepted;
          EXPECT_LE(r->size(), size_t{1} << 20);
        }
      }
    }
    std::printf("method %d: %zu of %zu single-byte flips still decode\n", static_cast<int>(m), accepted,
                4 * block.size());
  }
}

}  // namespace
}  // namespace kvc
