// Fuzzes the completion server's request reader: bodies come straight from the network.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "base/utf8.h"
#include "serve/completion_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] & 1;
  // Every other input byte's high bit: llama-server's /completion dialect instead.
  const bool llama = !chat && (data[0] & 0x80) != 0;
  const uint32_t limit = 1 + data[0] / 2;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const uint32_t max_n = 1 + data[0] % 4;
  const kvc::RequestDialect dialect = chat    ? kvc::RequestDialect::kChat
                                      : llama ? kvc::RequestDialect::kLlamaCompletion
                                              : kvc::RequestDialect::kCompletions;
  kvc::RequestFault fault;
  auto r = kvc::ParseCompletionRequest(body, dialect, {1, limit, max_n}, &fault);
  if (r.ok()) {
    // What is accepted keeps its promises: a budget and n in range, messages for a chat and a
    // prompt otherwise, valid UTF-8 (JSON strings are Unicode), sampling settings in range,
    // and at most four non-empty stop strings.
    // (kToContextEnd: n_predict -1, as many as the context has room for.)
    if (r->max_tokens > limit || r->n < 1 || r->n > max_n) std::abort();
    if (chat != !r->messages.empty() || (chat && (r->prompt_is_tokens || !r->prompt.empty()))) std::abort();
    if (r->prompt_is_tokens && (r->prompt_tokens.empty() || !r->prompt.empty())) std::abort();
    for (const int32_t id : r->prompt_tokens) {
      if (id < 0) std::abort();
    }
    for (const kvc::ChatMessage& m : r->messages) {
      if (!kvc::IsValidUtf8(m.role) || !kvc::IsValidUtf8(m.content)) std::abort();
    }
    if (!kvc::IsValidUtf8(r->prompt) || !kvc::CheckSamplingParams(r->sampling).ok()) std::abort();
    if (r->stop.size() > kvc::kMaxStopStrings || r->logprobs < -1 || r->logprobs > int32_t{kvc::kMaxTopLogprobs})
      std::abort();
    for (const std::string& s : r->stop) {
      if (s.empty() || !kvc::IsValidUtf8(s)) std::abort();
    }
    // The context check before tokenizing refuses exactly what cannot fit at max_token_bytes
    // bytes a token, and nothing when no bound is known.
    const size_t max_token_bytes = data[0] % 5;
    const bool fits = kvc::CheckPromptCanFit(r->prompt.size(), r->max_tokens, limit, max_token_bytes).ok();
    const uint64_t at_least = max_token_bytes == 0 ? 0 : (r->prompt.size() + max_token_bytes - 1) / max_token_bytes;
    if (fits != (at_least + r->max_tokens <= limit)) std::abort();
  } else if (r.status().code() != kvc::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
