#include "serve/openai_response.h"

#include <cmath>
#include <utility>

#include "base/utf8.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

}  // namespace

double LogprobValue(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

std::string DumpJson(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json ErrorObject(const ApiError& e) {
  const auto or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  return Json{
      {"error", {{"message", e.message}, {"type", e.type}, {"param", or_null(e.param)}, {"code", or_null(e.code)}}}};
}

std::string ErrorJson(const ApiError& error) { return DumpJson(ErrorObject(error)); }

const char* ErrorType(int status) { return status >= 500 ? "server_error" : "invalid_request_error"; }

Json TokenBytes(const std::string& bytes) {
  Json out = Json::array();
  for (const unsigned char b : bytes) out.push_back(b);
  return out;
}

// A token's "token" string is its bytes made valid UTF-8; "bytes" keeps them exact.
Json TokenLogprobEntries(const std::vector<TokenLogprob>& tokens) {
  Json content = Json::array();
  for (const TokenLogprob& t : tokens) {
    Json top = Json::array();
    for (const auto& [bytes, logprob] : t.top) {
      top.push_back({{"token", ToValidUtf8(bytes)}, {"logprob", LogprobValue(logprob)}, {"bytes", TokenBytes(bytes)}});
    }
    content.push_back({{"token", ToValidUtf8(t.bytes)},
                       {"logprob", LogprobValue(t.logprob)},
                       {"bytes", TokenBytes(t.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

Json ChatLogprobs(const std::vector<TokenLogprob>& tokens) {
  return {{"content", TokenLogprobEntries(tokens)}, {"refusal", nullptr}};
}

Json CompletionLogprobs(const std::vector<TokenLogprob>& tokens, size_t offset_base) {
  Json text_tokens = Json::array(), logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const TokenLogprob& t : tokens) {
    text_tokens.push_back(ToValidUtf8(t.bytes));
    logprobs.push_back(LogprobValue(t.logprob));
    Json alternatives = Json::object();
    for (const auto& [bytes, logprob] : t.top) alternatives.emplace(ToValidUtf8(bytes), LogprobValue(logprob));
    top.push_back(std::move(alternatives));
    offsets.push_back(offset_base + t.text_offset);
  }
  return {{"tokens", std::move(text_tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

Json LogprobsObject(bool chat, const std::vector<TokenLogprob>& tokens, size_t offset_base) {
  return chat ? ChatLogprobs(tokens) : CompletionLogprobs(tokens, offset_base);
}

Json UsageObject(const Generation& g) {
  return {{"prompt_tokens", g.prompt_tokens},
          {"completion_tokens", g.completion_tokens},
          {"total_tokens", g.prompt_tokens + g.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens}}}};
}

Json CompletionChoice(bool chat, uint32_t index, const std::string& text, const std::string& finish_reason,
                      Json logprobs) {
  Json choice = {{"index", index}, {"finish_reason", finish_reason}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  return choice;
}

Json CompletionObject(const ResponseHead& head, Json choices, Json usage) {
  return {{"id", head.id},
          {"object", head.chat ? "chat.completion" : "text_completion"},
          {"created", head.created},
          {"model", head.model},
          {"system_fingerprint", head.system_fingerprint},
          {"choices", std::move(choices)},
          {"usage", std::move(usage)}};
}

Json ChunkChoice(bool chat, uint32_t index, const std::string& text, bool first, const Json& finish_reason,
                 std::optional<Json> logprobs) {
  Json choice = {{"index", index}, {"finish_reason", finish_reason}};
  if (chat) {
    choice["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
    // The role rides on the first piece, so a client's first event is still its first token;
    // a first delta without text still carries "content", as OpenAI's does.
    if (first) {
      choice["delta"]["role"] = "assistant";
      if (!choice["delta"].contains("content")) choice["delta"]["content"] = "";
    }
  } else {
    choice["text"] = text;
  }
  if (logprobs) choice["logprobs"] = std::move(*logprobs);
  return choice;
}

Json ChunkObject(const ResponseHead& head, Json choices) {
  return Json{{"id", head.id},
              {"object", head.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", head.created},
              {"model", head.model},
              {"system_fingerprint", head.system_fingerprint},
              {"choices", std::move(choices)}};
}

Json ModelObject(const std::string& model, int64_t created) {
  return {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "kvcodec"}};
}

Json ModelList(const std::string& model, int64_t created) {
  return Json{{"object", "list"}, {"data", Json::array({ModelObject(model, created)})}};
}

}  // namespace kvc
