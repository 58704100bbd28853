// One stored chunk of a prompt's state, for any memory llama.cpp has.
//
// A memory's caches are of two sorts (seq_state.h). An attention cache that keeps a cell for every
// token (the standard cache, MLA, an indexer cache, the full-attention half of an iSWA pair) is
// restored for a prefix by putting its chunks' cells one after another: a chunk holds its own
// tokens' cells. What depends on the whole prefix instead, a sliding-window cache (only the last
// W tokens' cells) and a recurrent state (a fixed-size summary of every token so far), is kept
// as a snapshot taken at the chunk's end: a prefix restores only its last chunk's snapshot. So a
// chunk is its token sections plus, for memories that have the second sort, its boundary
// snapshot, stored as separate objects (a prefix fetches the token sections of every chunk but
// the snapshot of one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "llama/seq_state.h"

namespace kvc {

struct ChunkState {
  int32_t pos_begin = 0;
  uint32_t n_tokens = 0;
  // The memory's sections in the order it writes them: true where the section is a snapshot at
  // the chunk's end (the next of `boundary`), false where it holds the chunk's cells (the next of
  // `tokens`).
  std::vector<bool> at_boundary;
  SeqState tokens;    // attention sections, each of cells [pos_begin, pos_begin + n_tokens)
  SeqState boundary;  // sections whose state at the chunk's end a prefix restores as is
  bool operator==(const ChunkState&) const = default;
};

// kInvalidArgument unless `chunk` is consistent: at_boundary names as many token sections as it
// has, and (`with_boundary`) as many snapshot sections; every token section is attention holding
// exactly the chunk's cells.
Status CheckChunkState(const ChunkState& chunk, bool with_boundary = true);

// Whether the memory the chunk is of has snapshot sections (a prefix ending with this chunk
// needs its boundary object).
inline bool HasBoundary(const ChunkState& chunk) {
  for (const bool b : chunk.at_boundary) {
    if (b) return true;
  }
  return false;
}

// Which of `whole`'s sections are `snapshot`'s (what llama.cpp writes of the same sequence under
// LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY): the same kind and layers, in order, matched from the end.
// kInvalidArgument when `snapshot` is not part of `whole`.
Result<std::vector<bool>> MatchSnapshotSections(const SeqState& whole, const SeqState& snapshot);

// Chunk `index` of `whole` (a sequence's state from position 0, holding at least the chunk's
// cells in every section that is not a snapshot), its snapshot sections taken from `snapshot`
// (the sequence's state at the chunk's end; empty when `at_boundary` names none).
Result<ChunkState> SliceChunk(const SeqState& whole, const std::vector<bool>& at_boundary, const SeqState& snapshot,
                              uint32_t index, uint32_t chunk_tokens);

// The state of the prefix `chunks` make (consecutive chunks from its first token on, one memory
// layout): every token section's cells concatenated, the last chunk's snapshot sections (only
// the last chunk needs its boundary). kInvalidArgument when the chunks do not follow one another
// or their layouts differ.
Result<SeqState> ComposePrefixState(std::span<const ChunkState> chunks);

// Stored form of a chunk: the token object ("KVSC", version, pos_begin, n_tokens, the layout, the
// token sections as llama.cpp's state bytes) and, where the memory has snapshot sections, the
// boundary object (their state bytes). Both are hostile when read back: every size is checked
// (kCorrupt).
Result<std::vector<uint8_t>> WriteChunkTokens(const ChunkState& chunk);
Result<std::vector<uint8_t>> WriteChunkBoundary(const ChunkState& chunk);
// A chunk from its token object, without its boundary...
Result<ChunkState> ReadChunkTokens(std::span<const uint8_t> tokens);
// ... which this adds.
Status ReadChunkBoundary(std::span<const uint8_t> boundary, ChunkState* chunk);

}  // namespace kvc
