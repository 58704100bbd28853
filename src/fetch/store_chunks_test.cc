#include "fetch/store_chunks.h"

#include <gtest/gtest.h>

#include "store/chunk_manifest.h"
#include "store/memory_store.h"
#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kModel{1, 2, 3};
constexpr uint32_t kChunk = 32;

TEST(StoreChunks, EveryRungThenTheManifestFromTheFirstChunkAsked) {
  const KvCache kv =
      NoiseKv({.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 3 * kChunk + 5}, DType::kF16, 1);
  std::vector<int32_t> tokens(3 * kChunk + 5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 100);
  const std::vector<ChunkKey> keys = ChunkKeys(kModel, tokens, kChunk);
  ASSERT_EQ(keys.size(), 3u);
  auto owned = MakeMemoryStore({});
  Store& store = *owned;
  const std::vector<StoredRung> rungs = {{FindCodec("raw"), "fp16"}, {FindCodec("quant"), "8"}};
  EXPECT_EQ(RungNames(rungs), (std::vector<std::string>{"raw/fp16", "quant/8"}));
  auto stored = StoreChunks(store, kv.View(), keys, 1, kChunk, rungs, kModel, {});
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->chunks, 2u);
  EXPECT_FALSE(store.Exists(ChunkManifestName(keys[0])).value());
  uint64_t bytes = 0;
  for (uint32_t i = 1; i < 3; ++i) {
    auto manifest = ReadChunkManifest(store.Get(ChunkManifestName(keys[i])).value());
    ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
    EXPECT_EQ(manifest->chunk_index, i);
    EXPECT_EQ(manifest->chunk_tokens, kChunk);
    ASSERT_EQ(manifest->variants.size(), 2u);
    for (const auto& variant : manifest->variants) {
      auto object = store.Get(ChunkObjectName(keys[i], variant.codec, variant.level));
      ASSERT_TRUE(object.ok());
      EXPECT_EQ(object->size(), variant.bytes);
      bytes += object->size();
      // Each object holds its chunk's tokens, at their positions.
      auto decoded = DecodeKvc(*object, &kModel);
      ASSERT_TRUE(decoded.ok());
      EXPECT_EQ(decoded->shape().n_tokens, kChunk);
      EXPECT_EQ(decoded->pos_begin(), static_cast<int32_t>(i * kChunk));
    }
  }
  EXPECT_EQ(stored->bytes, bytes);
}

TEST(StoreChunks, KvShorterThanTheKeysIsAnError) {
  const KvCache kv = NoiseKv({.n_layers = 1, .n_kv_heads = 1, .head_dim = 8, .n_tokens = kChunk + 3}, DType::kF16, 2);
  const std::vector<int32_t> tokens(2 * kChunk, 5);
  auto owned = MakeMemoryStore({});
  Store& store = *owned;
  auto stored = StoreChunks(store, kv.View(), ChunkKeys(kModel, tokens, kChunk), 0, kChunk, *FindCodec("raw"), {"fp16"},
                            kModel, {});
  EXPECT_EQ(stored.status().code(), StatusCode::kInvalidArgument);
  // The first chunk, whole, was stored before the second was found missing.
  EXPECT_TRUE(store.Exists(ChunkManifestName(ChunkKeys(kModel, tokens, kChunk)[0])).value());
}

}  // namespace
}  // namespace kvc
