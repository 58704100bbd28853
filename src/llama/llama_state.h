// llama.cpp's per-sequence state blob (llama_state_seq_get_data / _set_data) <-> KvCache.
//
// The blob layout is llama.cpp's (src/llama-kv-cache.cpp, state_write for one sequence):
//   u32 magic 0xaf143cd8, i32 seq_id, u32 n_stream, then per stream: u32 cell_count and, when
//   non-zero, cell_count × (i32 pos, u32 n_seq_id, n_seq_id × i32 seq_id), then
//   u32 v_trans, u32 n_layer, per layer (i32 k_type, u64 k_row_bytes, cell_count rows), then
//   V per layer: untransposed (i32 type, u64 row_bytes, rows) or transposed
//   (i32 type, u32 elem_bytes, u32 n_embd_v, n_embd_v × cell_count elements).
// The parser treats the blob as hostile (it is also fed from files and the fuzzer).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "tensor/kv_cache.h"

namespace kvc {

inline constexpr uint32_t kLlamaStateMagic = 0xaf143cd8;
// ggml_type ids of the cache types we read and write.
inline constexpr int32_t kGgmlTypeF32 = 0;
inline constexpr int32_t kGgmlTypeF16 = 1;
inline constexpr int32_t kGgmlTypeBF16 = 30;
// The dtype of a cache of ggml type `type`: kUnsupported for any but f32, f16 and bf16 (a
// quantised cache), naming it.
Result<DType> DTypeFromGgml(int32_t type);
int32_t GgmlFromDType(DType dtype);

struct LlamaStateLayout {
  uint32_t n_stream = 1;      // streams in the target context (1 unless kv_unified is off with several sequences)
  uint32_t stream = 0;        // the stream the sequence lives in
  bool v_trans = true;        // V stored transposed (llama.cpp does so unless flash attention is on)
  DType dtype = DType::kF16;  // the context's K and V cache type
  int32_t seq_id = 0;
};

// Parses a sequence state blob into a KvCache with the cache's own dtype. `n_kv_heads` splits
// each row into heads. Cells are returned in position order; positions must be consecutive.
// `layout`, when given, receives how the blob was written (its v_trans above all: a context with
// flash attention refuses a state whose V is transposed, and one without it the other way), so
// the cache can be written back in the form its context takes.
Result<KvCache> ParseLlamaSeqState(std::span<const uint8_t> blob, uint32_t n_kv_heads,
                                   LlamaStateLayout* layout = nullptr);

// Serialises `kv` (whose dtype must equal layout.dtype) as a blob llama_state_seq_set_data
// accepts for a context with `layout`: into `out`, of exactly LlamaSeqStateBytes bytes (a
// caller restoring chunk after chunk keeps one buffer), or into a new vector.
Result<size_t> LlamaSeqStateBytes(const KvShape& shape, const LlamaStateLayout& layout);
Status WriteLlamaSeqState(const KvView& kv, const LlamaStateLayout& layout, std::span<uint8_t> out);
Result<std::vector<uint8_t>> BuildLlamaSeqState(const KvView& kv, const LlamaStateLayout& layout);
inline Result<std::vector<uint8_t>> BuildLlamaSeqState(const KvCache& kv, const LlamaStateLayout& layout) {
  return BuildLlamaSeqState(kv.View(), layout);
}

}  // namespace kvc
