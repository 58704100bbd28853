// The body of POST /v1/completions and /v1/chat/completions, read and checked before the server
// tokenizes it. The body comes from the network: anything malformed is an InvalidArgument whose
// message is what the 400 response says (fuzz target completion_request).
//
// Every field OpenAI defines is either honoured or refused by name: a client never gets an
// answer that silently disregards what it asked for. Fields sent with their do-nothing value
// (null, false, n = 1, a text response format, an empty tool list) are accepted, and so are the
// ones that only label a request for the caller (user, metadata, store, service_tier). A field
// OpenAI does not define is refused as OpenAI refuses it ("unknown_parameter"), except the
// llama.cpp server's own that this server honours (top_k, min_p, n_predict, cache_prompt).
// POST /completion, llama.cpp's native endpoint, takes llama-server's field names instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "llama/chat_message.h"
#include "llama/token_sampler.h"

namespace kvc {

// The chat prompt of a model without a chat template: each message as a "role: content" line,
// then "assistant:".
std::string PlainChatPrompt(const std::vector<ChatMessage>& messages);

// What a request may ask for, from the server's settings.
struct RequestLimits {
  uint32_t default_max_tokens = 64;
  uint32_t max_tokens_limit = 4096;  // max_tokens must lie in 1..this
  uint32_t max_n = 1;                // choices per request (the server's sequences)
};

// The most stop strings and the most alternatives per token a request may ask for.
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr uint32_t kMaxTopLogprobs = 20;

// Which body a request carries.
enum class RequestDialect {
  kCompletions,      // OpenAI's /v1/completions
  kChat,             // OpenAI's /v1/chat/completions
  kLlamaCompletion,  // llama-server's POST /completion (n_predict, n_probs, cache_prompt, ...)
};

// Which field a refused request is about and OpenAI's code for why, for the error's "param" and
// "code" (empty: null).
struct RequestFault {
  std::string param;
  std::string code;
};

// max_tokens of a request that generates until the context is full.
inline constexpr uint32_t kToContextEnd = 0;

struct CompletionRequest {
  std::string model;  // as the client named it; empty: not named
  // Completions: the prompt as text, or (prompt_is_tokens) as token ids, used as they are.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // Chat: the messages, for the server to format (the model's chat template).
  std::vector<ChatMessage> messages;

  uint32_t max_tokens = 0;  // kToContextEnd: as many as the context has room for (n_predict -1)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: usage in a last chunk of its own
  SamplingParams sampling;
  std::vector<std::string> stop;  // non-empty strings; the text ends before the first one found
  uint32_t n = 1;
  // Log-probabilities: -1 none; else each generated token's, with this many alternatives
  // (completions: `logprobs`; chat: `logprobs: true` with `top_logprobs`).
  int32_t logprobs = -1;
  bool echo = false;           // completions: the prompt's text starts the answer
  bool return_tokens = false;  // /completion: each answer carries its token ids ("tokens")
};

// The chat dialect carries `messages`, the others `prompt`. On an error, `fault` (when given)
// says which field is at fault.
Result<CompletionRequest> ParseCompletionRequest(std::string_view body, RequestDialect dialect,
                                                 const RequestLimits& limits, RequestFault* fault = nullptr);
// The OpenAI dialects by endpoint: `chat` is /v1/chat/completions.
inline Result<CompletionRequest> ParseCompletionRequest(std::string_view body, bool chat, const RequestLimits& limits,
                                                        RequestFault* fault = nullptr) {
  return ParseCompletionRequest(body, chat ? RequestDialect::kChat : RequestDialect::kCompletions, limits, fault);
}

// The context check before tokenizing: a prompt of `prompt_bytes` bytes is at least
// ceil(prompt_bytes / max_token_bytes) tokens (LlamaModel::max_token_bytes; 0: no bound known,
// nothing is rejected), so a prompt that cannot fit with `max_tokens` in `n_ctx` is rejected
// without the tokenizer's time (seconds for a body of megabytes). Never rejects one that fits.
Status CheckPromptCanFit(size_t prompt_bytes, uint32_t max_tokens, uint32_t n_ctx, size_t max_token_bytes);

}  // namespace kvc
