#include "llama/llama_model.h"

#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "base/hash.h"
#include "base/log.h"
#include "base/utf8.h"

namespace kvc {
namespace {

// llama.cpp logs model loading in detail, and warns about harmless metadata of converted
// models; pass on only its errors unless KVCODEC_LOG asks for more, so the CLI's stderr stays
// one line per error.
void QuietLog(ggml_log_level level, const char* text, void*) {
  const LogLevel ours = GetLogLevel();
  const bool show = level == GGML_LOG_LEVEL_ERROR || ours == LogLevel::kDebug ||
                    (ours == LogLevel::kInfo && level >= GGML_LOG_LEVEL_WARN);
  if (show) std::fputs(text, stderr);
}

bool NoProgressDots(float, void*) { return true; }

// SentencePiece and BPE vocabularies (byte fallback or byte-level) cover every byte of a text
// with exactly the bytes of the pieces that stand for it: SPM escapes a space as one U+2581 that
// the piece turns back into one space, byte-level BPE pieces decode to the raw bytes, and
// user-defined tokens match their own text. So the longest piece bounds the bytes per token.
// Other tokenizers may drop input (WPM splits whitespace away, UGM collapses it): no bound.
size_t MaxTokenBytes(const llama_vocab* vocab) {
  const enum llama_vocab_type type = llama_vocab_type(vocab);
  if (type != LLAMA_VOCAB_TYPE_SPM && type != LLAMA_VOCAB_TYPE_BPE) return 0;
  size_t longest = 1;
  const int32_t n = llama_vocab_n_tokens(vocab);
  char buf[256];
  for (int32_t t = 0; t < n; ++t) {
    const int32_t len = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, /*special=*/true);
    longest = std::max(longest, static_cast<size_t>(len < 0 ? -static_cast<int64_t>(len) : len));
  }
  return longest;
}

void InitBackendOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(QuietLog, nullptr);
    llama_backend_init();
  });
}

std::string MetaString(const llama_model* model, const std::string& key) {
  char buf[256];
  const int32_t n = llama_model_meta_val_str(model, key.c_str(), buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf);
}

Result<ModelFingerprint> FingerprintGguf(const std::string& path) {
  ggml_context* meta = nullptr;
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/&meta};
  gguf_context* gguf = gguf_init_from_file(path.c_str(), params);
  if (gguf == nullptr) return InvalidArgument("cannot read GGUF metadata of " + path);
  Xxh3Hasher h;
  const int64_t n_tensors = gguf_get_n_tensors(gguf);
  h.Update(&n_tensors, sizeof n_tensors);
  for (int64_t i = 0; i < n_tensors; ++i) {
    const char* name = gguf_get_tensor_name(gguf, i);
    h.Update(name, std::strlen(name) + 1);
    const int32_t type = gguf_get_tensor_type(gguf, i);
    const uint64_t offset = gguf_get_tensor_offset(gguf, i);
    h.Update(&type, sizeof type);
    h.Update(&offset, sizeof offset);
    if (const ggml_tensor* t = ggml_get_tensor(meta, name)) h.Update(t->ne, sizeof t->ne);
  }
  gguf_free(gguf);
  ggml_free(meta);
  return h.Digest();
}

// llama.cpp makes no KV memory for diffusion models (each step reads the whole sequence anew),
// encoders, and models without causal attention (BERT-like embedding models). A context is the
// ground truth (LlamaSession::Create with require_kv); this is known before making one.
bool ModelKeepsKv(const llama_model* model) {
  if (llama_model_is_diffusion(model) || !llama_model_has_decoder(model)) return false;
  const std::string arch = MetaString(model, "general.architecture");
  return MetaString(model, arch + ".attention.causal") != "false";
}

}  // namespace

Status ModelKeepsNoKv(const std::string& path) {
  return Unsupported("model " + path +
                     " keeps no KV cache (a diffusion or encoder model): there is nothing to store or reuse");
}

LlamaModel::~LlamaModel() {
  if (model_ != nullptr) llama_model_free(model_);
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return NotFound("model file not found: " + path);
  InitBackendOnce();
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->path_ = path;
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  params.progress_callback = NoProgressDots;
  m->model_ = llama_model_load_from_file(path.c_str(), params);
  if (m->model_ == nullptr) return InvalidArgument("llama.cpp could not load the model " + path);
  ASSIGN_OR_RETURN(m->fingerprint_, FingerprintGguf(path));
  m->max_token_bytes_ = MaxTokenBytes(llama_model_get_vocab(m->model_));
  m->keeps_kv_ = ModelKeepsKv(m->model_);

  ModelInfo& info = m->info_;
  info.architecture = MetaString(m->model_, "general.architecture");
  info.n_layers = static_cast<uint32_t>(llama_model_n_layer(m->model_));
  info.n_heads = static_cast<uint32_t>(llama_model_n_head(m->model_));
  info.n_kv_heads = static_cast<uint32_t>(llama_model_n_head_kv(m->model_));
  info.n_vocab = static_cast<uint32_t>(llama_vocab_n_tokens(llama_model_get_vocab(m->model_)));
  info.n_ctx_train = static_cast<uint32_t>(llama_model_n_ctx_train(m->model_));
  info.n_swa = static_cast<uint32_t>(std::max(0, llama_model_n_swa(m->model_)));
  info.recurrent = llama_model_is_recurrent(m->model_);
  info.hybrid = llama_model_is_hybrid(m->model_);
  const std::string key_length = MetaString(m->model_, info.architecture + ".attention.key_length");
  info.head_dim = key_length.empty() ? static_cast<uint32_t>(llama_model_n_embd(m->model_)) / std::max(1u, info.n_heads)
                                     : static_cast<uint32_t>(std::atoi(key_length.c_str()));
  switch (llama_model_rope_type(m->model_)) {
    case LLAMA_ROPE_TYPE_NORM:
      info.rope.type = RopeType::kNormal;
      break;
    case LLAMA_ROPE_TYPE_NEOX:
      info.rope.type = RopeType::kNeox;
      break;
    case LLAMA_ROPE_TYPE_NONE:  // ALiBi or learned positions: keys carry no rotation
      info.rope.type = RopeType::kNone;
      break;
    // Sectioned RoPE: keys are coded as stored (tensor/rope.h says why).
    case LLAMA_ROPE_TYPE_MROPE:
      info.rope.type = RopeType::kMrope;
      break;
    case LLAMA_ROPE_TYPE_IMROPE:
      info.rope.type = RopeType::kImrope;
      break;
    case LLAMA_ROPE_TYPE_VISION:
      info.rope.type = RopeType::kVision;
      break;
    default:
      return Unsupported("model " + path + " uses a RoPE variant kvcodec does not know");
  }
  const std::string base = MetaString(m->model_, info.architecture + ".rope.freq_base");
  info.rope.freq_base = base.empty() ? 10000.0f : static_cast<float>(std::atof(base.c_str()));
  info.rope.freq_scale = llama_model_rope_freq_scale_train(m->model_);
  const std::string n_rot = MetaString(m->model_, info.architecture + ".rope.dimension_count");
  info.rope.n_rot = n_rot.empty() ? info.head_dim : static_cast<uint32_t>(std::atoi(n_rot.c_str()));
  return m;
}

bool LlamaModel::has_tokenizer() const {
  return llama_vocab_type(llama_model_get_vocab(model_)) != LLAMA_VOCAB_TYPE_NONE;
}

Status LlamaModel::CheckKeepsKv() const { return keeps_kv_ ? Status::Ok() : ModelKeepsNoKv(path_); }

Result<std::vector<int32_t>> LlamaModel::Tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  if (!has_tokenizer()) {
    return Unsupported("model " + path_ +
                       " has no tokenizer (GGUF tokenizer.ggml.model \"no_vocab\"): it cannot read text; pass token "
                       "ids instead (eval, calibrate, encode: --token-file; serve: a prompt of token ids)");
  }
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::vector<llama_token> tokens(text.size() + 2);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                             static_cast<int32_t>(tokens.size()), add_bos, parse_special);
  if (n < 0) {
    tokens.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                       static_cast<int32_t>(tokens.size()), add_bos, parse_special);
  }
  if (n < 0) return Internal("tokenization failed");
  tokens.resize(static_cast<size_t>(n));
  return std::vector<int32_t>(tokens.begin(), tokens.end());
}

std::string LlamaModel::TokenText(int32_t token) const {
  if (!has_tokenizer()) return {};
  std::string piece(256, '\0');
  int32_t n = llama_token_to_piece(llama_model_get_vocab(model_), token, piece.data(),
                                   static_cast<int32_t>(piece.size()), 0, false);
  if (n < 0) {  // a longer piece (long runs of spaces in code vocabularies): -n bytes
    piece.resize(static_cast<size_t>(-static_cast<int64_t>(n)));
    n = llama_token_to_piece(llama_model_get_vocab(model_), token, piece.data(), static_cast<int32_t>(piece.size()), 0,
                             false);
  }
  piece.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return piece;
}

std::string LlamaModel::Detokenize(std::span<const int32_t> tokens) const {
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX) || !has_tokenizer()) return {};
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::string text(tokens.size() * 8 + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int32_t n = llama_detokenize(vocab, tokens.data(), static_cast<int32_t>(tokens.size()), text.data(),
                                       static_cast<int32_t>(std::min<size_t>(text.size(), INT32_MAX)), false, false);
    if (n >= 0) {
      text.resize(static_cast<size_t>(n));
      return text;
    }
    text.resize(static_cast<size_t>(-static_cast<int64_t>(n)));  // the size it needs
  }
  return {};
}

int32_t LlamaModel::bos_token() const { return llama_vocab_bos(llama_model_get_vocab(model_)); }

bool LlamaModel::IsEndOfGeneration(int32_t token) const {
  return llama_vocab_is_eog(llama_model_get_vocab(model_), token);
}

Result<std::string> LlamaModel::ChatTemplate(const std::string& name_or_template) const {
  std::string chosen = name_or_template;
  if (!has_tokenizer() && !chosen.empty()) {
    return Unsupported("model " + path_ + " has no tokenizer: a chat template's text cannot become its tokens");
  }
  if (chosen.empty()) {
    const char* own = llama_model_chat_template(model_, nullptr);
    if (own == nullptr) return std::string();
    chosen = own;
  }
  // llama.cpp knows a fixed list of templates (by name, or recognised in a template's text):
  // one it cannot apply is found now, not on the first request.
  if (auto probe = ApplyChatTemplate(chosen, {{"user", "hello"}}); !probe.ok()) {
    const std::string which = name_or_template.empty() ? "in " + path_ : PrintableOneLine(chosen.substr(0, 80));
    return Unsupported(
        FormatMessage("llama.cpp cannot apply the chat template %s (pass --chat-template with a built-in "
                      "name such as chatml, llama3, mistral-v7)",
                      which.c_str()));
  }
  return chosen;
}

Result<std::string> LlamaModel::ApplyChatTemplate(const std::string& chat_template,
                                                  const std::vector<ChatMessage>& messages) {
  std::vector<llama_chat_message> chat;
  size_t bytes = 0;
  for (const ChatMessage& m : messages) {
    chat.push_back({m.role.c_str(), m.content.c_str()});
    bytes += m.role.size() + m.content.size();
  }
  std::string out(2 * bytes + 256, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (out.size() > static_cast<size_t>(INT32_MAX)) return InvalidArgument("the chat is too long");
    const int32_t n = llama_chat_apply_template(chat_template.c_str(), chat.data(), chat.size(), true, out.data(),
                                                static_cast<int32_t>(out.size()));
    if (n < 0) return Unsupported("llama.cpp cannot apply this chat template");
    if (static_cast<size_t>(n) <= out.size()) {
      out.resize(static_cast<size_t>(n));
      return out;
    }
    out.resize(static_cast<size_t>(n));  // the length it needs: the second pass fits
  }
  return Internal("the chat template's output kept growing");
}

Status CheckWithinTrainingContext(const ModelInfo& model, uint64_t n_tokens, const std::string& what) {
  if (model.n_ctx_train == 0 || n_tokens <= model.n_ctx_train) return Status::Ok();
  return InvalidArgument(FormatMessage("%s: %llu tokens, more than the model's context of %u tokens (n_ctx_train)",
                                       what.c_str(), static_cast<unsigned long long>(n_tokens), model.n_ctx_train));
}

}  // namespace kvc
