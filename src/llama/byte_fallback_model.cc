#include "llama/byte_fallback_model.h"

#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <span>

#include "llama/llama_session.h"
#include "llama/token_sampler.h"

namespace kvc {
namespace {

constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kTypesKey[] = "tokenizer.ggml.token_type";
constexpr char kScoresKey[] = "tokenizer.ggml.scores";

struct GgufCloser {
  void operator()(gguf_context* g) const { gguf_free(g); }
};

// The array at `key`, if it has `n` elements of `type` (-1: absent).
int64_t ArrayKey(const gguf_context* g, const char* key, gguf_type type, size_t n) {
  const int64_t id = gguf_find_key(g, key);
  if (id < 0 || gguf_get_kv_type(g, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(g, id) != type ||
      gguf_get_arr_n(g, id) != n) {
    return -1;
  }
  return id;
}

}  // namespace

Result<std::string> MakeByteFallbackModel(const std::string& src_path, const std::string& dst_path,
                                          const std::map<int32_t, uint8_t>& bytes) {
  std::set<uint8_t> seen;
  for (const auto& [token, byte] : bytes) {
    if (!seen.insert(byte).second) return InvalidArgument(FormatMessage("byte 0x%02X is asked for twice", byte));
  }
  const gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  std::unique_ptr<gguf_context, GgufCloser> g(gguf_init_from_file(src_path.c_str(), params));
  if (g == nullptr) return InvalidArgument("cannot read the GGUF model " + src_path);
  const int64_t tokens_key = gguf_find_key(g.get(), kTokensKey);
  if (tokens_key < 0 || gguf_get_kv_type(g.get(), tokens_key) != GGUF_TYPE_ARRAY ||
      gguf_get_arr_type(g.get(), tokens_key) != GGUF_TYPE_STRING) {
    return InvalidArgument(src_path + " has no token list");
  }
  const size_t n = gguf_get_arr_n(g.get(), tokens_key);
  std::vector<std::string> text(n);
  for (size_t i = 0; i < n; ++i) text[i] = gguf_get_arr_str(g.get(), tokens_key, i);
  std::vector<int32_t> types(n, LLAMA_TOKEN_TYPE_NORMAL);
  if (const int64_t k = ArrayKey(g.get(), kTypesKey, GGUF_TYPE_INT32, n); k >= 0) {
    const auto* p = static_cast<const int32_t*>(gguf_get_arr_data(g.get(), k));
    types.assign(p, p + n);
  }
  const int64_t scores_key = ArrayKey(g.get(), kScoresKey, GGUF_TYPE_FLOAT32, n);
  std::vector<float> scores;
  if (scores_key >= 0) {
    const auto* p = static_cast<const float*>(gguf_get_arr_data(g.get(), scores_key));
    scores.assign(p, p + n);
  }

  for (const auto& [token, byte] : bytes) {
    if (token < 0 || static_cast<size_t>(token) >= n) return InvalidArgument(FormatMessage("no token %d", token));
    const std::string want = FormatMessage("<0x%02X>", byte);
    const auto at = std::find(text.begin(), text.end(), want);
    const auto t = static_cast<size_t>(token);
    if (at == text.end()) {
      text[t] = want;  // no byte token to trade with: the string is free
    } else if (const auto j = static_cast<size_t>(at - text.begin()); j != t) {
      std::swap(text[t], text[j]);
      std::swap(types[t], types[j]);
      if (!scores.empty()) std::swap(scores[t], scores[j]);
    }
    types[t] = LLAMA_TOKEN_TYPE_BYTE;
  }
  // One trade may undo another (a token asked to be a byte that another was traded with).
  for (const auto& [token, byte] : bytes) {
    if (text[static_cast<size_t>(token)] != FormatMessage("<0x%02X>", byte)) {
      return InvalidArgument(FormatMessage("token %d is itself the byte token another token trades with", token));
    }
  }

  std::vector<const char*> strings(n);
  for (size_t i = 0; i < n; ++i) strings[i] = text[i].c_str();
  const size_t data_offset = gguf_get_data_offset(g.get());
  gguf_set_arr_str(g.get(), kTokensKey, strings.data(), n);
  gguf_set_arr_data(g.get(), kTypesKey, GGUF_TYPE_INT32, types.data(), n);
  if (!scores.empty()) gguf_set_arr_data(g.get(), kScoresKey, GGUF_TYPE_FLOAT32, scores.data(), n);
  // The new metadata, then the tensor data as it was: tensor offsets count from the data's start.
  std::vector<char> meta(gguf_get_meta_size(g.get()));
  gguf_get_meta_data(g.get(), meta.data());
  std::ifstream in(src_path, std::ios::binary);
  std::ofstream out(dst_path, std::ios::binary | std::ios::trunc);
  if (!in || !out) return IoError("cannot copy " + src_path + " to " + dst_path);
  out.write(meta.data(), static_cast<std::streamsize>(meta.size()));
  in.seekg(static_cast<std::streamoff>(data_offset));
  out << in.rdbuf();
  out.flush();
  if (!in || !out) return IoError("cannot write " + dst_path);
  return dst_path;
}

std::string TokenBytes(const LlamaModel& model, const std::vector<int32_t>& tokens) {
  std::string out;
  for (const int32_t t : tokens) out += model.TokenText(t);
  return out;
}

Result<ByteFallbackPlan> PlanByteFallback(const LlamaModel& model, const std::string& prompt, uint32_t n_tokens) {
  ByteFallbackPlan plan;
  ASSIGN_OR_RETURN(plan.prompt_tokens, model.Tokenize(prompt, true));
  SessionOptions so;
  so.n_ctx = static_cast<uint32_t>(plan.prompt_tokens.size()) + n_tokens + 1;
  so.n_batch = std::max<uint32_t>(so.n_ctx, 1);
  so.n_threads = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaSession> session, LlamaSession::Create(model, so));
  RETURN_IF_ERROR(session->Eval(plan.prompt_tokens, false));
  for (uint32_t i = 0; i < n_tokens; ++i) {
    const int32_t token = GreedyToken(session->Logits(-1));
    if (model.IsEndOfGeneration(token)) break;
    plan.generated.push_back(token);
    if (i + 1 < n_tokens) RETURN_IF_ERROR(session->Eval(std::span(&token, 1), false));
  }

  const llama_vocab* vocab = llama_model_get_vocab(model.raw());
  const std::set<int32_t> in_prompt(plan.prompt_tokens.begin(), plan.prompt_tokens.end());
  std::set<int32_t> taken;
  auto usable = [&](int32_t t) {
    return in_prompt.count(t) == 0 && taken.count(t) == 0 && llama_vocab_get_attr(vocab, t) == LLAMA_TOKEN_ATTR_NORMAL;
  };
  // The first run of `spelling.size()` distinct usable tokens at or after `from`; its end.
  auto place = [&](const std::string& spelling, size_t from) -> Result<size_t> {
    const size_t len = spelling.size();
    for (size_t i = from; i + len <= plan.generated.size(); ++i) {
      std::set<int32_t> run;
      bool ok = true;
      for (size_t k = 0; k < len && ok; ++k) {
        const int32_t t = plan.generated[i + k];
        ok = usable(t) && run.insert(t).second;
      }
      if (!ok) continue;
      for (size_t k = 0; k < len; ++k) {
        plan.bytes[plan.generated[i + k]] = static_cast<uint8_t>(spelling[k]);
        taken.insert(plan.generated[i + k]);
      }
      return i + len;
    }
    return NotFound(
        FormatMessage("no run of %zu distinct new tokens in %zu generated ones", len, plan.generated.size()));
  };
  ASSIGN_OR_RETURN(const size_t after_cjk, place(kByteFallbackCjk, 0));
  RETURN_IF_ERROR(place(kByteFallbackEmoji, after_cjk).status());
  RETURN_IF_ERROR(place(kByteFallbackNever, 0).status());
  return plan;
}

}  // namespace kvc
