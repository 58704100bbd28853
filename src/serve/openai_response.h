// The JSON the server answers with in OpenAI's shapes: completion and chat completion objects,
// the chunks of a streamed one, usage, log-probabilities, error objects and the model list.
// Clients (the OpenAI SDKs) parse these bytes, so their shape is decided here, in one place, as
// pure functions of what a request produced: they can be checked without a model or a socket,
// and the server is left with serving.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/batch_scheduler.h"

namespace kvc {

// A value's text as sent. Every text we send is valid UTF-8 already (ServeRequest's pieces,
// Status::ToString); dumping with replacement is the second guard, so a byte that slipped
// through becomes U+FFFD instead of an exception.
std::string DumpJson(const nlohmann::json& j);

// What an error answer says: OpenAI's error object. `param` names the request field at fault and
// `code` is OpenAI's machine-readable reason ("context_length_exceeded", "unknown_parameter",
// "model_not_found", ...); either is null when empty, as OpenAI sends them (the SDKs read both).
struct ApiError {
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};
// {"error": {"message", "type", "param", "code"}}.
nlohmann::json ErrorObject(const ApiError& error);
// ErrorObject's text.
std::string ErrorJson(const ApiError& error);
// The error "type" of an HTTP status: the server's fault or the request's.
const char* ErrorType(int status);

// A log-probability as JSON can hold it: -inf (a probability that underflowed) as OpenAI
// reports it, -9999.
double LogprobValue(float logprob);

// A token's bytes as an array of numbers: a token may be part of a character, which a JSON
// string cannot hold.
nlohmann::json TokenBytes(const std::string& bytes);

// A choice's log-probabilities. Chat: {"content": [an entry per token with its alternatives],
// "refusal": null}. Completions: parallel arrays, whose offsets count from `offset_base` (the
// echoed prompt's bytes, which start the choice's text).
nlohmann::json ChatLogprobs(const std::vector<TokenLogprob>& tokens);
// The entries of ChatLogprobs' "content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"}]}], which llama-server's n_probs answers with too.
nlohmann::json TokenLogprobEntries(const std::vector<TokenLogprob>& tokens);
nlohmann::json CompletionLogprobs(const std::vector<TokenLogprob>& tokens, size_t offset_base);
nlohmann::json LogprobsObject(bool chat, const std::vector<TokenLogprob>& tokens, size_t offset_base);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}.
nlohmann::json UsageObject(const Generation& g);

// What every object of one response repeats.
struct ResponseHead {
  bool chat = false;  // /v1/chat/completions, else /v1/completions
  std::string id;
  int64_t created = 0;  // Unix seconds
  std::string model;
  // What determines the answers besides the request (the build, the model, the chat template),
  // as OpenAI's system_fingerprint: answers with one fingerprint and seed are reproducible.
  std::string system_fingerprint;
};

// A choice of a whole (not streamed) response; `logprobs` is null when none were asked for.
nlohmann::json CompletionChoice(bool chat, uint32_t index, const std::string& text, const std::string& finish_reason,
                                nlohmann::json logprobs);
// "chat.completion" or "text_completion".
nlohmann::json CompletionObject(const ResponseHead& head, nlohmann::json choices, nlohmann::json usage);

// A choice of a streamed chunk: a piece of its text, or its end (`finish_reason` a string, else
// null). `first`: the choice's first chat delta, which names the role (the SDK's stream helpers
// need it). `logprobs`: nullopt when none were asked for (no field), else the field's value.
nlohmann::json ChunkChoice(bool chat, uint32_t index, const std::string& text, bool first,
                           const nlohmann::json& finish_reason, std::optional<nlohmann::json> logprobs);
// "chat.completion.chunk" or "text_completion".
nlohmann::json ChunkObject(const ResponseHead& head, nlohmann::json choices);

// GET /v1/models/{id}: the one model served.
nlohmann::json ModelObject(const std::string& model, int64_t created);
// GET /v1/models: the one model served.
nlohmann::json ModelList(const std::string& model, int64_t created);

}  // namespace kvc
