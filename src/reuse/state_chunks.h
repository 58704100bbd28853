// Reuse for models whose memory is not one KV cache of uniform layers: sliding-window (iSWA)
// pairs, MLA and indexer caches, hybrid attention + recurrent memories, recurrent-only models,
// caches with M-RoPE cell extensions. Each chunk is stored as a ChunkState (llama/chunk_state.h):
// its token object ("<key>.state.tokens": its cells in every cache that keeps one per token) and,
// where the memory keeps a sliding window or a recurrent state, its boundary object
// ("<key>.state.boundary": a snapshot of those at the chunk's end), then the chunk's manifest
// listing both. A prefix of n chunks fetches n token objects and one boundary object, composes
// them and restores the result whole. Lossless: these layouts have no codec rungs yet.
#pragma once

#include <span>
#include <string>

#include "fetch/store_chunks.h"
#include "llama/chunk_state.h"
#include "llama/llama_session.h"
#include "reuse/prefix_reuse.h"
#include "store/chunk_key.h"
#include "store/chunk_manifest.h"
#include "store/store.h"

namespace kvc {

inline constexpr char kStateChunkCodec[] = "state";

// Whether a manifest lists a state chunk (else it lists codec rungs of a KV cache).
bool IsStateChunkManifest(const ChunkManifest& manifest);

// Stores `chunk` (chunk `chunk_index` of its prompt, under `key`): its objects, then its manifest.
Result<StoredChunks> StoreStateChunk(Store& store, const ChunkKey& key, uint32_t chunk_index, uint32_t chunk_tokens,
                                     const ChunkState& chunk);

// Stores chunks [first, keys.size()) of the session's sequence, which must hold them all and
// start at position 0. Only for memories without snapshot sections (a snapshot is of the moment
// a chunk ends: those are stored while the prompt is prefilled, chunk by chunk).
Result<StoredChunks> StoreSessionStateChunks(Store& store, LlamaSession& session, std::span<const ChunkKey> keys,
                                             uint32_t first, uint32_t chunk_tokens);

// Stores chunks [first, keys.size()) of a sequence whose state is `whole` (from position 0, its
// cells in every section that keeps them per token), where `snapshots[i]` is the sequence's
// snapshot (LlamaSession::ExtractSnapshot) when it ended at chunk first + i's end; `snapshots`
// is empty for a memory without snapshot sections. What a server keeps of a finished request.
Result<StoredChunks> StoreStateChunks(Store& store, const SeqState& whole, std::span<const SeqState> snapshots,
                                      std::span<const ChunkKey> keys, uint32_t first, uint32_t chunk_tokens);

// The looked-up run of state chunks, read: every chunk's token object, the last chunk's boundary
// object. A chunk whose objects are missing or damaged ends the run there (the rest is
// recomputed); what was read and why it stopped are in `stats`, as for a KV cache prefix.
struct FetchedStatePrefix {
  PrefixRestore stats;
  std::vector<ChunkState> chunks;
};
Result<FetchedStatePrefix> FetchStoredStatePrefix(Store& store, std::span<const ChunkKey> keys,
                                                  const PrefixLookup& lookup);

// Restores the looked-up run of state chunks into `session` (which must be empty): every chunk's
// token object, the last chunk's boundary object, composed and restored whole. A chunk whose
// objects are missing or damaged ends the run there (the rest is recomputed); what was restored
// and why it stopped are in the result, as for a KV cache prefix.
Result<PrefixRestore> RestoreStoredStatePrefix(Store& store, LlamaSession& session, std::span<const ChunkKey> keys,
                                               const PrefixLookup& lookup);

}  // namespace kvc
