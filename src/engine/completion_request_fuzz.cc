// Fuzzes the completion server's request reader: bodies come straight from the network.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/completion_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] & 1;
  const uint32_t limit = 1 + data[0] / 2;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = kvc::ParseCompletionRequest(body, chat, 1, limit);
  if (r.ok()) {
    // What is accepted keeps its promises: a budget in range, and a chat prompt that ends
    // with the assistant's turn.
    if (r->max_tokens < 1 || r->max_tokens > limit) std::abort();
    if (chat && !std::string_view(r->prompt).ends_with("assistant:")) std::abort();
  } else if (r.status().code() != kvc::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
