// Writing a prompt's chunks to a store: every chunk at every rung (codec, level), then its manifest,
// as `kvcodec run`, the server, the TTFT benchmark and the Python package store them; the fetcher
// (fetcher.h) reads what this writes. Nothing here needs an inference engine: the KV comes from a
// view or from a source the caller fills one chunk at a time.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "store/chunk_key.h"
#include "store/store.h"
#include "tensor/kv_cache.h"

namespace kvc {

// One (codec, level) a chunk is stored at.
struct StoredRung {
  const Codec* codec = nullptr;
  std::string level;
};

// "raw/fp16,kvtc/16,..." for reports.
std::vector<std::string> RungNames(const std::vector<StoredRung>& rungs);

struct StoredChunks {
  uint32_t chunks = 0;
  uint64_t bytes = 0;
};

// Chunk i's KV (tokens [i * chunk_tokens, (i + 1) * chunk_tokens)), which the source may keep
// only until its next call.
using ChunkKvSource = std::function<Result<KvView>(uint32_t chunk_index)>;

// Stores chunks [first, keys.size()) at every rung, each chunk's manifest after its objects,
// asking `chunk_kv` for one chunk at a time.
Result<StoredChunks> StoreChunks(Store& store, const ChunkKvSource& chunk_kv, std::span<const ChunkKey> keys,
                                 uint32_t first, uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context);

// The same from `kv` (chunk i = tokens [i * chunk_tokens, ...) of the view), which must hold every
// chunk keys names.
Result<StoredChunks> StoreChunks(Store& store, const KvView& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context);
// The same at every level of one codec.
Result<StoredChunks> StoreChunks(Store& store, const KvView& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const Codec& codec, const std::vector<std::string>& levels,
                                 const ModelFingerprint& model, const CodecContext& codec_context);

}  // namespace kvc
