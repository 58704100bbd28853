// Keys of stored KV chunks. A prompt is cut into chunks of `chunk_tokens`
// tokens; chunk i's key hashes the key of chunk i-1 (for chunk 0: the model fingerprint) with
// chunk i's tokens, so a key names a whole prefix, not just one chunk's tokens, and two models
// never share keys. xxh3-128 over fixed little-endian bytes: the same on every machine.
// Layout of the hashed bytes and of object names: docs/format.md ("Chunk keys").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/hash.h"
#include "format/container.h"

namespace kvc {

inline constexpr uint32_t kDefaultChunkTokens = 256;

using ChunkKey = Hash128;

// Keys of the whole chunks of `tokens` (floor(tokens / chunk_tokens) of them; the tokens after
// them are a tail, keyed by ChunkTailKey).
std::vector<ChunkKey> ChunkKeys(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                uint32_t chunk_tokens = kDefaultChunkTokens);

// The key a chunk hashes with its tokens: the chunk before it, or for the first chunk the model
// (so keys[i - 1], or `model` for i = 0).
inline ChunkKey PreviousChunkKey(const ModelFingerprint& model, std::span<const ChunkKey> keys, size_t i) {
  return i == 0 ? ChunkKey(model) : keys[i - 1];
}

// The key of a tail: `tokens` (fewer than a whole chunk) right after the chunk keyed `previous`
// (PreviousChunkKey). Its own domain, so no tail and no whole chunk ever share a key.
ChunkKey ChunkTailKey(const ChunkKey& previous, std::span<const int32_t> tokens);

// "<32 hex>.<codec>.<level>": one encoded variant of a chunk.
std::string ChunkObjectName(const ChunkKey& key, std::string_view codec, std::string_view level);
// "<32 hex>.manifest": which variants of a chunk are stored, and their sizes.
std::string ChunkManifestName(const ChunkKey& key);
// "<32 hex>.tails": the tails stored after the chunk keyed `previous` (chunk_tails.h).
std::string ChunkTailsName(const ChunkKey& previous);

}  // namespace kvc
