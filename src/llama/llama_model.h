// A GGUF model loaded through llama.cpp: what it is (ModelInfo, its fingerprint), its tokenizer
// and chat template. llama.cpp's headers are included only by the .cc files of src/llama/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/container.h"
#include "llama/chat_message.h"
#include "tensor/kv_cache.h"
#include "tensor/rope.h"

struct llama_model;

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
  // The geometry of `n_tokens` tokens of the model's KV (K and V), as the codecs take it.
  KvShape KvShapeOf(uint32_t n_tokens) const {
    return KvShape{.n_layers = n_layers, .n_kv_heads = n_kv_heads, .head_dim = head_dim, .n_tokens = n_tokens};
  }
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

// The error for a model llama.cpp keeps no KV memory for (LlamaModel::CheckKeepsKv's, and a
// session's that requires one).
[[nodiscard]] Status ModelKeepsNoKv(const std::string& path);

// kInvalidArgument, naming `what` and both counts, when `n_tokens` is more than the model was
// trained on (its n_ctx_train; no check when the model does not say). Called before a context
// is made for a whole document: llama.cpp would otherwise allocate a cache of that size (4.9 GB
// for 500,000 tokens of a small model) and grind through a prefill whose output means nothing.
[[nodiscard]] Status CheckWithinTrainingContext(const ModelInfo& model, uint64_t n_tokens, const std::string& what);

}  // namespace kvc
