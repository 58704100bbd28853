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

// The context check before tokenizing: a prompt of `prompt_bytes` bytes is at least
// ceil(prompt_bytes / max_token_bytes) tokens (LlamaModel::max_token_bytes; 0: no bound known,
// nothing is rejected), so a prompt that cannot fit with `max_tokens` in `n_ctx` is rejected
// without the tokenizer's time (seconds for a body of megabytes). Never rejects one that fits.
Status CheckPromptCanFit(size_t prompt_bytes, uint32_t max_tokens, uint32_t n_ctx, size_t max_token_bytes);

}  // namespace kvc
