#include "fetch/decoded_chunk_cache.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{7, 7, 7};
constexpr KvShape kChunk{.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 16};

ChunkKey Key(uint8_t n) {
  ChunkKey k{};
  k[0] = n;
  k[15] = static_cast<uint8_t>(n * 3);
  return k;
}

TEST(DecodedChunkCache, KeepsACopyAndLetsTheLeastRecentlyUsedGo) {
  const uint64_t chunk_bytes = kChunk.fp16_bytes();
  DecodedChunkCache memory(3 * chunk_bytes);
  std::vector<KvCache> kv;
  for (uint32_t i = 0; i < 4; ++i) kv.push_back(NoiseKv(kChunk, DType::kF16, i, static_cast<int32_t>(16 * i)));
  const ChunkVariant raw{"raw", "fp16", 0};
  for (uint8_t i = 0; i < 3; ++i) ASSERT_TRUE(memory.Put(Key(i), kv[i].View(), raw).ok());
  EXPECT_EQ(memory.bytes(), 3 * chunk_bytes);
  // A copy: the entry is the KV as it was put, at its positions.
  auto held = memory.Find(Key(1));
  ASSERT_NE(held, nullptr);
  EXPECT_TRUE(held->kv == kv[1]);
  EXPECT_EQ(held->kv.pos_begin(), 16);
  EXPECT_EQ(held->variant.codec, "raw");
  // Chunk 0 is now the least recently used (1 was just found): a fourth lets it go.
  ASSERT_TRUE(memory.Put(Key(3), kv[3].View(), raw).ok());
  EXPECT_FALSE(memory.Contains(Key(0)));
  EXPECT_TRUE(memory.Contains(Key(1)));
  EXPECT_TRUE(memory.Contains(Key(2)));
  EXPECT_TRUE(memory.Contains(Key(3)));
  EXPECT_EQ(memory.bytes(), 3 * chunk_bytes);
  EXPECT_EQ(memory.entries(), 3u);
  // An entry found before it was let go stays valid for whoever holds it.
  for (uint8_t i = 10; i < 14; ++i) ASSERT_TRUE(memory.Put(Key(i), kv[0].View(), raw).ok());
  EXPECT_FALSE(memory.Contains(Key(1)));
  EXPECT_TRUE(held->kv == kv[1]);
}

TEST(DecodedChunkCache, ReplacesAKeysEntryAndKeepsNothingLargerThanItsLimit) {
  const ChunkVariant raw{"raw", "fp16", 0};
  DecodedChunkCache memory(kChunk.fp16_bytes());
  const KvCache a = NoiseKv(kChunk, DType::kF16, 1);
  const KvCache b = NoiseKv(kChunk, DType::kF16, 2);
  ASSERT_TRUE(memory.Put(Key(0), a.View(), raw).ok());
  ASSERT_TRUE(memory.Put(Key(0), b.View(), {"kvtc", "16", 0}).ok());
  EXPECT_EQ(memory.entries(), 1u);
  EXPECT_EQ(memory.bytes(), kChunk.fp16_bytes());
  EXPECT_TRUE(memory.Find(Key(0))->kv == b);
  EXPECT_EQ(memory.Find(Key(0))->variant.level, "16");
  KvShape twice = kChunk;
  twice.n_tokens *= 2;
  ASSERT_TRUE(memory.Put(Key(1), NoiseKv(twice, DType::kF16, 3).View(), raw).ok());
  EXPECT_FALSE(memory.Contains(Key(1)));
  EXPECT_TRUE(memory.Contains(Key(0)));
  DecodedChunkCache off(0);
  ASSERT_TRUE(off.Put(Key(0), a.View(), raw).ok());
  EXPECT_EQ(off.entries(), 0u);
  // fp32 in, fp16 kept.
  DecodedChunkCache wide(kChunk.fp16_bytes());
  ASSERT_TRUE(wide.Put(Key(0), NoiseKv(kChunk, DType::kF32, 4).View(), raw).ok());
  EXPECT_EQ(wide.Find(Key(0))->kv.dtype(), DType::kF16);
}

// Under the keys a lookup asks for: the sequence's whole chunks, its tail, and the prompt's tail.
TEST(DecodedChunkCache, RemembersAHeldSequenceUnderItsLookupKeys) {
  std::vector<int32_t> held(40);
  for (size_t i = 0; i < held.size(); ++i) held[i] = static_cast<int32_t>(100 + i);
  KvShape shape = kChunk;
  shape.n_tokens = 40;
  const KvCache kv = NoiseKv(shape, DType::kF16, 5);
  DecodedChunkCache memory(uint64_t{1} << 20);
  // The prompt: 20 reusable tokens (one chunk and a tail of 4); the sequence: two chunks and 8.
  ASSERT_TRUE(RememberHeldChunks(memory, kv.View(), held, 20, 16, kFp).ok());
  const std::vector<ChunkKey> keys = ChunkKeys(kFp, held, 16);
  ASSERT_EQ(keys.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto e = memory.Find(keys[i]);
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(e->kv == kv.View(static_cast<uint32_t>(16 * i), 16).value().Copy().value());
  }
  auto sequence_tail = memory.Find(ChunkTailKey(keys[1], std::span(held).subspan(32)));
  ASSERT_NE(sequence_tail, nullptr);
  EXPECT_EQ(sequence_tail->kv.pos_begin(), 32);
  EXPECT_EQ(sequence_tail->kv.shape().n_tokens, 8u);
  auto prompt_tail = memory.Find(ChunkTailKey(keys[0], std::span(held).subspan(16, 4)));
  ASSERT_NE(prompt_tail, nullptr);
  EXPECT_TRUE(prompt_tail->kv == kv.View(16, 4).value().Copy().value());
  EXPECT_EQ(memory.entries(), 4u);
  EXPECT_FALSE(RememberHeldChunks(memory, kv.View(0, 10).value(), held, 20, 16, kFp).ok())
      << "a KV shorter than the sequence";
}

// Put, Find and eviction from several threads at once (run under ThreadSanitizer by
// scripts/test.sh).
TEST(DecodedChunkCache, SharedBetweenThreads) {
  DecodedChunkCache memory(4 * kChunk.fp16_bytes());
  const KvCache kv = NoiseKv(kChunk, DType::kF16, 9);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const ChunkKey k = Key(static_cast<uint8_t>((t * 7 + i) % 9));
        if (i % 2 == 0) {
          EXPECT_TRUE(memory.Put(k, kv.View(), {"raw", "fp16", 0}).ok());
        } else if (auto e = memory.Find(k)) {
          EXPECT_TRUE(e->kv == kv);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(memory.bytes(), 4 * kChunk.fp16_bytes());
}

}  // namespace
}  // namespace kvc
