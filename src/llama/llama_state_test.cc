#include "llama/llama_state.h"

#include <gtest/gtest.h>

#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

KvCache RandomCache(const KvShape& shape, DType dtype, int32_t pos_begin = 0) {
  return NoiseKv(shape, dtype, 7, pos_begin);
}

KvCache RandomCache(DType dtype, uint32_t tokens, int32_t pos_begin) {
  return RandomCache({3, 2, 8, tokens}, dtype, pos_begin);
}

class LlamaStateTest : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(LlamaStateTest, BuildThenParseIsIdentity) {
  const auto [dtype, v_trans] = GetParam();
  const KvCache kv = RandomCache(dtype, 5, 3);
  LlamaStateLayout layout;
  layout.dtype = dtype;
  layout.v_trans = v_trans;
  auto blob = BuildLlamaSeqState(kv, layout);
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  LlamaStateLayout read;
  read.v_trans = !v_trans;
  auto parsed = ParseLlamaSeqState(*blob, 2, &read);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, kv);
  // The layout it was written with comes back, so the cache can be written back as it came.
  EXPECT_EQ(read.v_trans, v_trans);
  EXPECT_EQ(read.dtype, dtype);
  EXPECT_EQ(BuildLlamaSeqState(*parsed, read).value(), *blob);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LlamaStateTest,
                         ::testing::Combine(::testing::Values(DType::kF16, DType::kF32, DType::kBF16),
                                            ::testing::Bool()));

TEST(LlamaState, SeveralStreamsOneUsed) {
  const KvCache kv = RandomCache(DType::kF16, 4, 0);
  LlamaStateLayout layout;
  layout.n_stream = 3;
  layout.stream = 1;
  layout.seq_id = 5;
  auto blob = BuildLlamaSeqState(kv, layout);
  ASSERT_TRUE(blob.ok());
  LlamaStateLayout read;
  auto parsed = ParseLlamaSeqState(*blob, 2, &read);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, kv);
  EXPECT_EQ(read.n_stream, 3u);
  EXPECT_EQ(read.stream, 1u);
  EXPECT_EQ(read.seq_id, 5);
}

// A chunk restored straight from the prefix buffer (a view) is the same blob as its own copy,
// across more tokens than one transpose tile, in the first of two streams.
TEST(LlamaState, AViewOfALongerCacheBuildsItsCopysBlob) {
  for (DType dtype : {DType::kF16, DType::kF32}) {
    const KvCache prefix = RandomCache(dtype, 100, 0);
    const KvView chunk = prefix.View(40, 45).value();
    LlamaStateLayout layout;
    layout.dtype = dtype;
    layout.n_stream = 2;
    const auto from_view = BuildLlamaSeqState(chunk, layout).value();
    EXPECT_EQ(from_view, BuildLlamaSeqState(chunk.Copy().value(), layout).value());
    EXPECT_EQ(ParseLlamaSeqState(from_view, 2).value(), chunk.Copy().value());
  }
}

// V is transposed in 8x8 blocks where the shape allows and value by value at the edges: every
// mix of whole blocks and remainders (channels and tokens not multiples of 8, several tiles of
// tokens) parses back to the cache it came from.
TEST(LlamaState, TransposedVAtEveryBlockRemainder) {
  for (const KvShape shape : {KvShape{1, 3, 7, 75}, KvShape{2, 2, 8, 64}, KvShape{1, 1, 5, 3}, KvShape{1, 4, 4, 33}}) {
    const KvCache kv = RandomCache(shape, DType::kF16);
    const auto blob = BuildLlamaSeqState(kv, {}).value();
    EXPECT_EQ(ParseLlamaSeqState(blob, shape.n_kv_heads).value(), kv)
        << shape.n_kv_heads << "x" << shape.head_dim << " channels, " << shape.n_tokens << " tokens";
  }
}

TEST(LlamaState, ACacheOfKeysAloneHasNoState) {
  KvShape shape{2, 2, 8, 4};
  shape.keys_only = true;
  const KvCache kv = RandomCache(shape, DType::kF16);
  const auto blob = BuildLlamaSeqState(kv, {});
  ASSERT_FALSE(blob.ok());
  EXPECT_EQ(blob.status().code(), StatusCode::kUnsupported);
}

TEST(LlamaState, WritesIntoABufferOfExactlyTheStatesSize) {
  const KvCache kv = RandomCache(DType::kF16, 9, 2);
  const LlamaStateLayout layout;
  const size_t bytes = LlamaSeqStateBytes(kv.shape(), layout).value();
  std::vector<uint8_t> buffer(bytes + 1, 0xee);
  EXPECT_FALSE(WriteLlamaSeqState(kv.View(), layout, std::span(buffer)).ok());
  EXPECT_FALSE(WriteLlamaSeqState(kv.View(), layout, std::span(buffer).first(bytes - 1)).ok());
  ASSERT_TRUE(WriteLlamaSeqState(kv.View(), layout, std::span(buffer).first(bytes)).ok());
  EXPECT_EQ(std::vector<uint8_t>(buffer.begin(), buffer.begin() + bytes), BuildLlamaSeqState(kv, layout).value());
  EXPECT_EQ(buffer.back(), 0xee);  // nothing written past the state
}

TEST(LlamaState, EveryTruncationFails) {
  const KvCache kv = RandomCache(DType::kF16, 3, 0);
  auto blob = BuildLlamaSeqState(kv, {}).value();
  for (size_t n = 0; n < blob.size(); ++n) {
    auto parsed = ParseLlamaSeqState(std::span(blob.data(), n), 2);
    EXPECT_FALSE(parsed.ok()) << "prefix " << n;
  }
}

TEST(LlamaState, RejectsHostileHeaders) {
  const KvCache kv = RandomCache(DType::kF16, 3, 0);
  auto blob = BuildLlamaSeqState(kv, {}).value();
  auto bad_magic = blob;
  bad_magic[0] ^= 1;
  EXPECT_NE(ParseLlamaSeqState(bad_magic, 2).status().message().find("magic"), std::string::npos);
  auto huge_cells = blob;
  huge_cells[12] = 0xff;  // cell_count low byte
  huge_cells[13] = 0xff;
  EXPECT_FALSE(ParseLlamaSeqState(huge_cells, 2).ok());
  auto trailing = blob;
  trailing.push_back(0);
  EXPECT_FALSE(ParseLlamaSeqState(trailing, 2).ok());
  EXPECT_FALSE(ParseLlamaSeqState(blob, 3).ok());  // 16 values per row do not split into 3 heads
}

TEST(LlamaState, TypeMismatchIsAnError) {
  const KvCache kv = RandomCache(DType::kF16, 3, 0);
  LlamaStateLayout layout;
  layout.dtype = DType::kF32;
  EXPECT_FALSE(BuildLlamaSeqState(kv, layout).ok());
}

}  // namespace
}  // namespace kvc
