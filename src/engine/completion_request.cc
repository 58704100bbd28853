#include "engine/completion_request.h"

#include <nlohmann/json.hpp>

namespace kvc {

namespace {

using Json = nlohmann::json;

// Message content: a string, or an array of text parts ({"type": "text", "text": ...}) joined.
Result<std::string> ContentText(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return InvalidArgument("each message needs string 'role' and 'content'");
  std::string text;
  for (const Json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part.at("type").is_string()) {
      return InvalidArgument("each content part needs a string 'type'");
    }
    const std::string& type = part.at("type").get_ref<const std::string&>();
    if (type != "text") {
      return InvalidArgument("content parts of type '" + type + "' are not supported (only 'text')");
    }
    if (!part.contains("text") || !part.at("text").is_string()) return InvalidArgument("a text part needs a string 'text'");
    text += part.at("text").get_ref<const std::string&>();
  }
  return text;
}

// Fields this server does not implement yet: refused by name rather than silently ignored, so a
// client never gets an answer that disregards what it asked for. A field sent with its
// do-nothing value (null, false, n = 1, a text response format) is accepted.
Status RefuseUnsupported(const Json& body) {
  static constexpr const char* kUnsupported[] = {"tools", "tool_choice", "functions", "function_call", "stop",
                                                 "logprobs", "top_logprobs", "echo", "suffix", "best_of",
                                                 "logit_bias"};
  for (const char* field : kUnsupported) {
    const auto it = body.find(field);
    if (it == body.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
    if (it->is_array() && it->empty()) continue;
    return InvalidArgument(std::string("'") + field + "' is not supported by this server yet");
  }
  if (const auto n = body.find("n"); n != body.end() && !n->is_null() && !(n->is_number_unsigned() && *n == 1)) {
    return InvalidArgument("'n' other than 1 is not supported by this server yet");
  }
  if (const auto format = body.find("response_format"); format != body.end() && !format->is_null()) {
    const bool text = format->is_object() && format->contains("type") && format->at("type") == "text";
    if (!text) return InvalidArgument("'response_format' other than {\"type\": \"text\"} is not supported");
  }
  return Status::Ok();
}

// max_completion_tokens (OpenAI's current name) or max_tokens (the older one); null is the default.
Result<uint32_t> MaxTokens(const Json& body, uint32_t default_max_tokens, uint32_t limit) {
  const Json* chosen = nullptr;
  const char* name = "max_tokens";
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    const auto it = body.find(field);
    if (it == body.end() || it->is_null()) continue;
    if (chosen != nullptr && *chosen != *it) {
      return InvalidArgument("'max_tokens' and 'max_completion_tokens' disagree");
    }
    chosen = &*it;
    name = field;
  }
  if (chosen == nullptr) return default_max_tokens;
  // Parsed from text, a non-negative integer is stored unsigned: anything else is out of range.
  const bool in_range =
      chosen->is_number_unsigned() && chosen->get<uint64_t>() >= 1 && chosen->get<uint64_t>() <= limit;
  if (!in_range) return InvalidArgument(FormatMessage("'%s' must be an integer in 1..%u", name, limit));
  return static_cast<uint32_t>(chosen->get<uint64_t>());
}

}  // namespace

Result<CompletionRequest> ParseCompletionRequest(std::string_view text, bool chat, uint32_t default_max_tokens,
                                                 uint32_t max_tokens_limit) {
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
      const bool well_formed = m.is_object() && m.contains("role") && m.at("role").is_string() && m.contains("content");
      if (!well_formed) return InvalidArgument("each message needs string 'role' and 'content'");
      ASSIGN_OR_RETURN(const std::string content, ContentText(m.at("content")));
      r.prompt += m.at("role").get_ref<const std::string&>() + ": " + content + "\n";
    }
    r.prompt += "assistant:";
  } else {
    const auto prompt = body.find("prompt");
    // A string, or (as the SDK may send it) an array holding one string.
    const bool one_string_array = prompt != body.end() && prompt->is_array() && prompt->size() == 1 &&
                                  prompt->at(0).is_string();
    if (prompt == body.end() || !(prompt->is_string() || one_string_array)) {
      return InvalidArgument("'prompt' must be a string (or an array of one string)");
    }
    r.prompt = one_string_array ? prompt->at(0).get<std::string>() : prompt->get<std::string>();
  }
  RETURN_IF_ERROR(RefuseUnsupported(body));
  ASSIGN_OR_RETURN(r.max_tokens, MaxTokens(body, default_max_tokens, max_tokens_limit));
  if (const auto stream = body.find("stream"); stream != body.end() && !stream->is_null()) {
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
