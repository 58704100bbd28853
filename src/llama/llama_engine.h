// The llama.cpp adapter: the only code in kvcodec that includes llama.cpp headers.
// Loads a GGUF model, prefills token sequences, and moves a sequence's KV cache out of and
// back into a llama.cpp context through its sequence-state API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/container.h"
#include "llama/chat_message.h"
#include "llama/chunk_state.h"
#include "llama/seq_state.h"
#include "llama/token_sampler.h"
#include "tensor/kv_cache.h"
#include "tensor/rope.h"

struct llama_model;
struct llama_context;

namespace kvc {

struct ModelInfo {
  std::string architecture;
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  RopeParams rope;
  // What the memory keeps beyond a cell per token: sliding-window caches (n_swa > 0) and
  // recurrent states (recurrent-only or hybrid models). Where it does, a stored chunk carries a
  // snapshot of that at its end (chunk_state.h).
  uint32_t n_swa = 0;
  bool recurrent = false;
  bool hybrid = false;
  bool SnapshotsAtChunkEnds() const { return n_swa > 0 || recurrent || hybrid; }
};

class LlamaModel {
 public:
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  // Fails with a clear error when the file is missing or not a model llama.cpp can run.
  static Result<std::unique_ptr<LlamaModel>> Load(const std::string& path);

  const ModelInfo& info() const { return info_; }
  // xxh3-128 of the model file's tensor metadata (names, types, shapes, offsets) and its
  // hyper-parameters: equal for the same weights layout, different for another model.
  const ModelFingerprint& fingerprint() const { return fingerprint_; }
  const std::string& path() const { return path_; }

  // False for a GGUF without a tokenizer (tokenizer.ggml.model "no_vocab"): such a model takes
  // token ids only. llama.cpp aborts the process when asked to tokenize or spell a token of it,
  // so Tokenize refuses and TokenText and Detokenize give empty text, never calling it.
  bool has_tokenizer() const;
  // False when the model has no BOS token (bos_token() is then -1): nothing is prepended.
  bool has_bos() const { return bos_token() >= 0; }
  // False for models llama.cpp keeps no KV cache for (diffusion models such as Dream and LLaDA,
  // encoders, non-causal embedding models): there is nothing to store or reuse.
  bool keeps_kv() const { return keeps_kv_; }
  // kUnsupported naming the model when !keeps_kv(); what run, serve, eval and calibrate say first.
  [[nodiscard]] Status CheckKeepsKv() const;

  // `parse_special`: text spelling a special token (a chat template's "<|im_start|>") becomes
  // that token; off for user text, which must not forge one. `add_bos`: the BOS is added where
  // the model's tokenizer adds one. kUnsupported without a tokenizer, saying to pass token ids.
  Result<std::vector<int32_t>> Tokenize(std::string_view text, bool add_bos, bool parse_special = false) const;
  // Empty without a tokenizer.
  std::string TokenText(int32_t token) const;
  // The text `tokens` spell, as llama.cpp detokenizes it (a tokenizer's space prefix before the
  // first word dropped). Bytes, not necessarily valid UTF-8. Ids must be in the vocabulary.
  // Empty without a tokenizer.
  std::string Detokenize(std::span<const int32_t> tokens) const;
  // The most bytes of text one token stands for (the longest token piece), so a text of B bytes
  // is at least ceil(B / max_token_bytes()) tokens: a context check that needs no tokenizing.
  // 0 when no such bound holds (tokenizers that normalize text away, such as WPM and UGM
  // dropping whitespace).
  size_t max_token_bytes() const { return max_token_bytes_; }
  int32_t bos_token() const;  // -1 when the model has none
  // End of sequence / end of turn: generation stops there.
  bool IsEndOfGeneration(int32_t token) const;

  // The chat template a chat request's messages are formatted with: `name_or_template` (a
  // built-in template's name, such as "chatml", or a template's text), else the model's own
  // (GGUF tokenizer.chat_template); empty when there is neither. Fails when the template is
  // one llama.cpp cannot apply, or when one is named for a model without a tokenizer.
  Result<std::string> ChatTemplate(const std::string& name_or_template) const;
  // The prompt `messages` make under `chat_template` (from ChatTemplate), ending with the
  // assistant's turn opened.
  static Result<std::string> ApplyChatTemplate(const std::string& chat_template,
                                               const std::vector<ChatMessage>& messages);

  llama_model* raw() const { return model_; }

 private:
  LlamaModel() = default;
  llama_model* model_ = nullptr;
  ModelInfo info_;
  ModelFingerprint fingerprint_{};
  std::string path_;
  size_t max_token_bytes_ = 0;
  bool keeps_kv_ = true;
};

struct SessionOptions {
  uint32_t n_ctx = 2048;  // tokens per sequence
  uint32_t n_seq = 1;     // sequences in the context (continuous batching), each its own stream
  uint32_t n_batch = 512;
  // Tokens llama.cpp computes per step (its n_ubatch; 0: n_batch); see BoundedUbatch. On the
  // CPU the KV and logits come out bit for bit the same whatever it is (llama_engine_test).
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

// kInvalidArgument, naming `what` and both counts, when `n_tokens` is more than the model was
// trained on (its n_ctx_train; no check when the model does not say). Called before a context
// is made for a whole document: llama.cpp would otherwise allocate a cache of that size (4.9 GB
// for 500,000 tokens of a small model) and grind through a prefill whose output means nothing.
[[nodiscard]] Status CheckWithinTrainingContext(const ModelInfo& model, uint64_t n_tokens, const std::string& what);

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
