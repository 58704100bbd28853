// The whole of one sequence's state as llama_state_seq_get_data writes it, for every memory kind
// llama.cpp has, parsed and written back byte for byte.
//
// After the u32 magic and i32 seq_id, a memory writes its caches one after another, with no tag
// saying which is which (llama.cpp, src/llama-kv-cache.cpp, src/llama-memory-recurrent.cpp and the
// memories composed of them):
//   - one attention cache (llama_kv_cache): the standard cache, MLA (K only, V absent);
//   - two (llama_kv_cache_iswa: full-attention layers, then the sliding-window ones, whose cells
//     outside the window are not written; _msa / _dsa: the cache, then its indexer cache);
//   - attention, then recurrent (llama_memory_hybrid), with an indexer cache after both
//     (llama_memory_hybrid_idx), or base + sliding-window + recurrent (llama_memory_hybrid_iswa);
//   - one recurrent state (llama_memory_recurrent: Mamba, RWKV);
//   - nothing (models that keep no KV: encoders, diffusion models).
// An attention section: u32 n_stream, then per stream u32 cell_count and, when non-zero,
// cell_count x (i32 pos, u32 n_seq_id = 1, [12-byte cell extension: M-RoPE's 2-D position and the
// token, when the cache keeps one], i32 seq_id), u32 v_trans, u32 n_layer, n_layer x K (i32 type,
// u64 row bytes, rows), then V for each layer that has one: (i32 type, u64 row bytes, rows) or,
// transposed, (i32 type, u32 element bytes, u32 values per row, values by channel).
// A recurrent section: u32 cell_count, cell_count x (i32 pos, u32 n_seq_id, n_seq_id x i32),
// u32 s_trans = 0, u32 n_layer, then for each recurrent layer R (i32 type, u64 row bytes, rows,
// and in models with a per-layer-embedding conv history its rows: u64 row bytes, rows), then for
// each S (i32 type, u64 row bytes, rows).
// Since nothing marks a section's kind, the parser tries each reading and keeps the one that
// accounts for every byte; every size is checked against what is left before it is used (the
// blob may come from a file or a store).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"

namespace kvc {

// One layer's K or V in an attention section: `rows` holds one row of `row_bytes` per cell, in
// position order (a transposed V is stored untransposed here).
struct StateTensor {
  int32_t ggml_type = 0;
  uint32_t elem_bytes = 0;  // bytes per value when written transposed; 0 when unknown (row-written)
  uint64_t row_bytes = 0;
  std::vector<uint8_t> rows;
  bool operator==(const StateTensor&) const = default;
};

// The bytes of a cell's extension (llama_kv_cell_ext: i32 x, i32 y, i32 token) when a cache keeps one.
inline constexpr uint32_t kCellExtBytes = 12;

struct AttentionSection {
  uint32_t n_stream = 1;
  uint32_t stream = 0;  // the stream holding the cells; the others are written empty
  // Cells, in position order: consecutive positions from pos_begin. A sliding-window cache holds
  // only the window's, so pos_begin may be past 0.
  int32_t pos_begin = 0;
  uint32_t n_cells = 0;
  uint32_t cell_ext_bytes = 0;    // 0 or kCellExtBytes
  std::vector<uint8_t> cell_ext;  // n_cells x cell_ext_bytes
  bool v_trans = false;
  std::vector<StateTensor> k;  // one per layer of this cache
  std::vector<StateTensor> v;  // empty (MLA keeps K only) or one per layer
  bool operator==(const AttentionSection&) const = default;
};

// A recurrent memory's state for the sequence: a fixed-size snapshot at a position, kept as
// written (restored as is, never split by token).
struct RecurrentSection {
  std::vector<uint8_t> bytes;  // the section exactly as written
  uint32_t n_cells = 0;        // 1 when the sequence has a state, else 0
  int32_t pos = -1;            // the position it was taken at (the last token's), -1 without cells
  uint32_t n_layer = 0;        // layers of the model
  uint32_t n_recurrent_layers = 0;
  uint64_t r_row_bytes = 0;        // the rolling (conv) state per layer
  uint64_t history_row_bytes = 0;  // a per-layer-embedding conv history after each R; 0: none
  uint64_t s_row_bytes = 0;        // the recurrent (ssm / wkv) state per layer
  bool operator==(const RecurrentSection&) const = default;
};

using StateSection = std::variant<AttentionSection, RecurrentSection>;

struct SeqState {
  int32_t seq_id = 0;
  std::vector<StateSection> sections;
  bool operator==(const SeqState&) const = default;
};

// What a memory is made of, from its sections: "none", "attention", "attention+attention",
// "attention+recurrent", "recurrent", ...
std::string SeqStateKinds(const SeqState& state);

// Parses a blob from llama_state_seq_get_data. kCorrupt when no reading of the sections accounts
// for every byte; kUnsupported for a layout llama.cpp does not write for one sequence (a cell
// shared by several sequences, non-consecutive positions).
Result<SeqState> ParseSeqState(std::span<const uint8_t> blob);

// The blob llama_state_seq_set_data takes: for a state ParseSeqState returned, the bytes it was
// parsed from when llama.cpp wrote the cells in position order (as a fresh context does).
// `as_seq`: written as sequence `as_seq`'s state instead (its id on every cell, and in a section
// of per-sequence streams, its stream): a state moved to another sequence, without a copy.
Result<size_t> SeqStateBytes(const SeqState& state);
Result<std::vector<uint8_t>> WriteSeqState(const SeqState& state, std::optional<int32_t> as_seq = std::nullopt);

}  // namespace kvc
