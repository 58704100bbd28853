// Fuzzes the completion server's request reader: bodies come straight from the network.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "base/utf8.h"
#include "engine/completion_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] & 1;
  const uint32_t limit = 1 + data[0] / 2;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = kvc::ParseCompletionRequest(body, chat, 1, limit);
  if (r.ok()) {
    // What is accepted keeps its promises: a budget in range, a chat prompt that ends with the
    // assistant's turn, and valid UTF-8 (JSON strings are Unicode).
    if (r->max_tokens < 1 || r->max_tokens > limit) std::abort();
    if (chat && !std::string_view(r->prompt).ends_with("assistant:")) std::abort();
    if (!kvc::IsValidUtf8(r->prompt)) std::abort();
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
