// One llama.cpp context of a loaded model: prefills and batched decodes, and a sequence's KV
// cache or whole state moved out of and back into it through llama.cpp's sequence-state API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "llama/chunk_state.h"
#include "llama/llama_model.h"
#include "llama/seq_state.h"
#include "tensor/kv_cache.h"

struct llama_context;

namespace kvc {

struct SessionOptions {
  uint32_t n_ctx = 2048;  // tokens per sequence
  uint32_t n_seq = 1;     // sequences in the context (continuous batching), each its own stream
  uint32_t n_batch = 512;
  // Tokens llama.cpp computes per step (its n_ubatch; 0: n_batch); see BoundedUbatch. On the
  // CPU the KV and logits come out bit for bit the same whatever it is (llama_session_test).
  uint32_t n_ubatch = 0;
  int n_threads = 0;               // 0: all cores
  DType cache_type = DType::kF16;  // K and V cache type: f16, bf16 or f32
  bool flash_attn = false;         // on: V is stored untransposed
  // Refuse (LlamaModel::CheckKeepsKv's error) a context llama.cpp gives no KV memory: callers
  // that store, restore or compare KV set it; llama.cpp's own state of such a model is still valid.
  bool require_kv = false;
};

// The n_ubatch for a long prompt's prefill. Without flash attention llama.cpp holds each step's
// attention scores over every cached token: about n_ubatch x cells x (6 x n_heads + 4) bytes
// (f32 scores, their f16 copy for the product with V, the f32 mask), where the cache itself is
// cells x (K and V bytes per token); at n_ubatch 512 that scratch is several times the cache.
// Returns the largest power of two up to options.n_batch whose scratch is at most the cache's
// own size, but not under 16; n_batch with flash attention.
uint32_t BoundedUbatch(const ModelInfo& model, const SessionOptions& options);

// One sequence's tokens in a batched decode: `tokens` at positions pos, pos+1, ...; the logits of
// the last one are kept.
struct SeqTokens {
  int32_t seq = 0;
  int32_t pos = 0;
  std::span<const int32_t> tokens;
};

// One llama.cpp context. The single-sequence calls (Eval, ExtractKv, RestoreKv, Clear) work on
// seq 0 and track its position; a server batching several sequences uses DecodeBatch and the
// per-sequence calls and tracks positions itself.
class LlamaSession {
 public:
  ~LlamaSession();
  LlamaSession(const LlamaSession&) = delete;
  LlamaSession& operator=(const LlamaSession&) = delete;

  static Result<std::unique_ptr<LlamaSession>> Create(const LlamaModel& model, const SessionOptions& options);

  // Evaluates `tokens` at positions next_position()...; keeps logits for every token when
  // `all_logits`, else only for the last.
  Status Eval(std::span<const int32_t> tokens, bool all_logits);
  // Logits of the i-th token of the last Eval call (i = -1: the last one).
  std::span<const float> Logits(int i) const;
  // The last Eval's logits for its last token; fails when there are none (no Eval since the
  // session was created, cleared or restored, or the last one failed).
  Result<std::span<const float>> LastLogits() const;

  // The sequence's KV cache as llama.cpp holds it (dtype = the cache type).
  Result<KvCache> ExtractKv() const;
  // Tokens [pos_begin, pos_begin + n_tokens) of the sequence, bit-identical to that slice of
  // ExtractKv() but without copying the rest: the range's cells are shared with the staging
  // sequence (in a unified cache only a relabelling) and that sequence's state is read. A long
  // prompt is stored chunk by chunk this way, never held twice over (llama.cpp's state blob and
  // its parse). Single-sequence sessions only, as for AppendKv.
  Result<KvCache> ExtractKvRange(int32_t pos_begin, uint32_t n_tokens);
  // Replaces the sequence with `kv` (converted to the cache type if needed); the next Eval
  // continues at position kv.pos_begin() + kv.shape().n_tokens.
  Status RestoreKv(const KvView& kv);
  Status RestoreKv(const KvCache& kv) { return RestoreKv(kv.View()); }
  // Adds `chunk`, which must start at next_position(), after the sequence's tokens: a prefix
  // restored chunk by chunk as it arrives ends bit-identical to restoring it whole. Through a
  // staging sequence llama.cpp shares cells with (a restore replaces its target sequence), so
  // only single-sequence sessions can.
  Status AppendKv(const KvView& chunk);
  void Clear();

  // Decodes several sequences' tokens in one llama.cpp batch (at most n_batch tokens in all).
  Status DecodeBatch(std::span<const SeqTokens> entries);
  // Logits of entry i's last token after DecodeBatch.
  std::span<const float> BatchLogits(size_t entry) const;
  Result<KvCache> ExtractSeqKv(int32_t seq) const;
  // Replaces sequence `seq` with `kv` at its own positions.
  Status RestoreSeqKv(int32_t seq, const KvView& kv);
  void ClearSeq(int32_t seq);
  // Drops sequence `seq`'s tokens from position `keep` on, so it continues at `keep`. Only a
  // memory that is one KV cache can lose its last tokens (MemoryIsOneKvCache): a recurrent state
  // or a sliding window cannot go back, and llama.cpp refuses (kUnsupported, the sequence
  // untouched).
  Status TrimSeq(int32_t seq, uint32_t keep);
  // Sequence `seq`'s whole state as llama.cpp writes it: every cache of the model's memory
  // (sliding-window, MLA, indexer and recurrent ones included), parsed (seq_state.h).
  Result<SeqState> ExtractState(int32_t seq = 0) const;
  // Replaces sequence `seq` with `state` (from ExtractState of a context of the same model and
  // cache type, any sequence); the sequence continues after the last position it holds.
  Status RestoreState(const SeqState& state, int32_t seq = 0);
  // The bytes llama_state_seq_get_data writes for `seq`, and the restore of such bytes as they
  // are: llama.cpp's own save and restore, the peer kvcodec is measured against.
  Result<std::vector<uint8_t>> StateBlob(int32_t seq = 0) const;
  // Its size, without copying it: what llama.cpp's own save of the sequence writes.
  size_t StateBlobBytes(int32_t seq = 0) const;
  Status RestoreStateBlob(std::span<const uint8_t> blob, int32_t seq = 0);
  // Tokens [pos_begin, pos_begin + n_tokens) of the sequence as a stored chunk (chunk_state.h):
  // their cells, and where the memory keeps more (ModelInfo::SnapshotsAtChunkEnds) a snapshot of
  // it, so the sequence must then end at the chunk's end. Single-sequence sessions only.
  Result<ChunkState> ExtractChunkState(int32_t pos_begin, uint32_t n_tokens);
  // Replaces the sequence with the prefix `chunks` make (ComposePrefixState).
  Status RestoreChunks(std::span<const ChunkState> chunks);
  // Whether the model's memory is one KV cache of uniform layers (a KvCache: what the codecs
  // take), learnt from sequence `seq` (which must hold tokens) and kept. Otherwise its chunks are
  // stored as ChunkStates.
  Result<bool> MemoryIsOneKvCache(int32_t seq = 0);
  // What llama.cpp writes of sequence `seq` under LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: its
  // sliding-window caches and recurrent states, the snapshot a chunk ending where the sequence
  // now ends keeps (ChunkState::boundary). Empty for a model without them.
  Result<SeqState> ExtractSnapshot(int32_t seq);

  // Makes sequence `dst` a copy of sequence `src` (its KV and positions), within llama.cpp: n
  // answers to one prompt share its prefill.
  Status CopySeq(int32_t src, int32_t dst);

  // Makes an empty session's next token sit at `pos` instead of 0 (RoPE tests use this).
  Status SetNextPosition(int32_t pos);

  int32_t next_position() const { return next_pos_; }
  uint32_t n_cached() const { return n_cached_; }
  uint32_t n_vocab() const { return n_vocab_; }
  const SessionOptions& options() const { return options_; }

 private:
  LlamaSession() = default;
  // Checks `kv` against the model and writes it as sequence `seq`'s state (llama.cpp first
  // empties that sequence).
  Status WriteSeqState(int32_t seq, const KvView& kv);
  // Sequence `seq`'s state (any sequence of the context, staging included) as a KvCache.
  Result<KvCache> ReadSeqState(int32_t seq) const;
  const LlamaModel* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  SessionOptions options_;
  int32_t next_pos_ = 0;
  uint32_t n_cached_ = 0;
  uint32_t n_vocab_ = 0;
  std::vector<int32_t> last_logit_rows_;  // batch index -> logits row, for the last Eval
  std::optional<bool> one_kv_cache_;
  // The state blob a restore hands llama.cpp, kept from one chunk to the next so each append
  // writes into pages already mapped (a chunk-sized blob; a larger one is freed after use).
  std::vector<uint8_t> state_blob_;
};

}  // namespace kvc
