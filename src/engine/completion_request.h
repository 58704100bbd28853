// The body of POST /v1/completions and /v1/chat/completions, read and checked before the server
// tokenizes it. The body comes from the network: anything malformed is an InvalidArgument whose
// message is what the 400 response says (fuzz target completion_request).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvc {

struct CompletionRequest {
  std::string prompt;  // chat: each message as a "role: content" line, then "assistant:"
  uint32_t max_tokens = 0;
  bool stream = false;
};

// `chat`: the body carries `messages`, else `prompt`. `max_tokens` defaults to
// `default_max_tokens` and must lie in 1..max_tokens_limit.
Result<CompletionRequest> ParseCompletionRequest(std::string_view body, bool chat, uint32_t default_max_tokens,
                                                 uint32_t max_tokens_limit);

}  // namespace kvc
