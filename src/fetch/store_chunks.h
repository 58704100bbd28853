// Writing a prompt's chunks to a store: every chunk at every rung (codec, level), then its manifest,
// and the tokens after the last whole chunk as a tail (store/chunk_tails.h), as `kvcodec run`, the
// server, the TTFT benchmark and the Python package store them; the fetcher (fetcher.h) reads what
// this writes. Nothing here needs an inference engine: the KV comes from a
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
  uint32_t tail_tokens = 0;  // of a tail stored (0: none, or the store held it already)
  uint64_t bytes = 0;
};

// The KV of tokens [token_begin, token_begin + n_tokens) (a chunk or the tail), which the source
// may keep only until its next call.
using ChunkKvSource = std::function<Result<KvView>(uint32_t token_begin, uint32_t n_tokens)>;

// Stores chunks [first, keys.size()) at every rung, each chunk's manifest after its objects,
// asking `chunk_kv` for one chunk at a time. Then `tail` (the tokens right after keys' chunks,
// fewer than a chunk; empty: none): at every rung a codec can encode so few tokens at, then added
// to its tails list (store/chunk_tails.h) unless the list holds it already (nothing is encoded
// then). The list is read, changed and written back: two writers at once may lose one's tail,
// which costs only its reuse.
Result<StoredChunks> StoreChunks(Store& store, const ChunkKvSource& chunk_kv, std::span<const ChunkKey> keys,
                                 uint32_t first, uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context,
                                 std::span<const int32_t> tail = {});

// A sequence holding `held` tokens (a prompt and what was generated after it, but the last
// token), of which the first `prompt_reusable` are what the same prompt again may reuse: its
// whole chunks from `first` and its tail, so that a later prompt continuing it (a conversation's
// next turn) finds them, and where the held tokens reach past a whole chunk the prompt's own
// reusable tokens do not, the prompt's tail too, so that the same prompt again finds all it may
// reuse.
Result<StoredChunks> StoreHeldChunks(Store& store, const ChunkKvSource& chunk_kv, std::span<const int32_t> held,
                                     size_t prompt_reusable, uint32_t first, uint32_t chunk_tokens,
                                     const std::vector<StoredRung>& rungs, const ModelFingerprint& model,
                                     const CodecContext& codec_context);

// The same from `kv` (chunk i = tokens [i * chunk_tokens, ...) of the view), which must hold every
// chunk keys names, and the tail.
Result<StoredChunks> StoreChunks(Store& store, const KvView& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context,
                                 std::span<const int32_t> tail = {});
// The same at every level of one codec.
Result<StoredChunks> StoreChunks(Store& store, const KvView& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const Codec& codec, const std::vector<std::string>& levels,
                                 const ModelFingerprint& model, const CodecContext& codec_context);

}  // namespace kvc
