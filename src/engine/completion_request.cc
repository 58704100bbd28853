#include "engine/completion_request.h"

#include <nlohmann/json.hpp>

namespace kvc {

Result<CompletionRequest> ParseCompletionRequest(std::string_view text, bool chat, uint32_t default_max_tokens,
                                                 uint32_t max_tokens_limit) {
  using Json = nlohmann::json;
  // Parsing without exceptions: a malformed body comes back discarded, never thrown.
  const Json body = Json::parse(text.begin(), text.end(), nullptr, false);
  if (body.is_discarded()) return InvalidArgument("the body is not valid JSON");
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
  CompletionRequest r;
  if (chat) {
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array() || messages->empty()) {
      return InvalidArgument("'messages' must be a non-empty array");
    }
    for (const Json& m : *messages) {
      const bool well_formed = m.is_object() && m.contains("role") && m.at("role").is_string() &&
                               m.contains("content") && m.at("content").is_string();
      if (!well_formed) return InvalidArgument("each message needs string 'role' and 'content'");
      r.prompt += m.at("role").get_ref<const std::string&>() + ": " + m.at("content").get_ref<const std::string&>() + "\n";
    }
    r.prompt += "assistant:";
  } else {
    const auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string()) return InvalidArgument("'prompt' must be a string");
    r.prompt = prompt->get<std::string>();
  }
  r.max_tokens = default_max_tokens;
  if (const auto max_tokens = body.find("max_tokens"); max_tokens != body.end()) {
    // Parsed from text, a non-negative integer is stored unsigned: anything else is out of range.
    const bool in_range = max_tokens->is_number_unsigned() && max_tokens->get<uint64_t>() >= 1 &&
                          max_tokens->get<uint64_t>() <= max_tokens_limit;
    if (!in_range) return InvalidArgument(FormatMessage("'max_tokens' must be an integer in 1..%u", max_tokens_limit));
    r.max_tokens = static_cast<uint32_t>(max_tokens->get<uint64_t>());
  }
  if (const auto stream = body.find("stream"); stream != body.end()) {
    if (!stream->is_boolean()) return InvalidArgument("'stream' must be a boolean");
    r.stream = stream->get<bool>();
  }
  return r;
}

Status CheckPromptCanFit(size_t prompt_bytes, uint32_t max_tokens, uint32_t n_ctx, size_t max_token_bytes) {
  if (max_token_bytes == 0) return Status::Ok();
  const uint64_t at_least = prompt_bytes / max_token_bytes + (prompt_bytes % max_token_bytes != 0 ? 1 : 0);
  if (at_least + max_tokens <= n_ctx) return Status::Ok();
  return InvalidArgument(FormatMessage("the prompt (%zu bytes, so at least %llu tokens) plus max_tokens (%u) exceed the context of %u tokens",
                                       prompt_bytes, static_cast<unsigned long long>(at_least), max_tokens, n_ctx));
}

}  // namespace kvc
