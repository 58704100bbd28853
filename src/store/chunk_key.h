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

// Keys of the whole chunks of `tokens` (floor(tokens / chunk_tokens) of them; a partial last
// chunk has no key: it is never stored).
std::vector<ChunkKey> ChunkKeys(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                uint32_t chunk_tokens = kDefaultChunkTokens);

// "<32 hex>.<codec>.<level>": one encoded variant of a chunk.
std::string ChunkObjectName(const ChunkKey& key, std::string_view codec, std::string_view level);
// "<32 hex>.manifest": which variants of a chunk are stored, and their sizes.
std::string ChunkManifestName(const ChunkKey& key);

}  // namespace kvc
