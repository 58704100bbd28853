#include "serve/completion_request.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/utf8.h"

namespace kvc {

std::string PlainChatPrompt(const std::vector<ChatMessage>& messages) {
  std::string prompt;
  for (const ChatMessage& m : messages) prompt += m.role + ": " + m.content + "\n";
  return prompt + "assistant:";
}

namespace {

using Json = nlohmann::json;

// A field that is absent or null: the default.
const Json* Field(const Json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

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
    if (!part.contains("text") || !part.at("text").is_string())
      return InvalidArgument("a text part needs a string 'text'");
    text += part.at("text").get_ref<const std::string&>();
  }
  return text;
}

// Fields this server does not implement: refused by name.
Status RefuseUnsupported(const Json& body, bool chat) {
  static constexpr const char* kUnsupported[] = {"tools",         "tool_choice", "functions",
                                                 "function_call", "suffix",      "logit_bias"};
  for (const char* field : kUnsupported) {
    const Json* value = Field(body, field);
    if (value == nullptr || (value->is_boolean() && !value->get<bool>())) continue;
    if ((value->is_array() || value->is_object()) && value->empty()) continue;
    if (value->is_string() && *value == "none") continue;  // tool_choice "none": no tools
    return InvalidArgument(std::string("'") + field + "' is not supported by this server");
  }
  if (const Json* best_of = Field(body, "best_of");
      best_of != nullptr && !(best_of->is_number_unsigned() && *best_of == 1)) {
    return InvalidArgument("'best_of' other than 1 is not supported by this server");
  }
  if (const Json* format = Field(body, "response_format"); format != nullptr) {
    const bool text = format->is_object() && format->contains("type") && format->at("type") == "text";
    if (!text) return InvalidArgument("'response_format' other than {\"type\": \"text\"} is not supported");
  }
  if (chat) {
    if (const Json* echo = Field(body, "echo"); echo != nullptr && !(echo->is_boolean() && !echo->get<bool>())) {
      return InvalidArgument("'echo' is a completions field; chat completions do not take it");
    }
  }
  return Status::Ok();
}

// max_completion_tokens (OpenAI's current name) or max_tokens (the older one); null is the default.
Result<uint32_t> MaxTokens(const Json& body, uint32_t default_max_tokens, uint32_t limit) {
  const Json* chosen = nullptr;
  const char* name = "max_tokens";
  for (const char* field : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    const Json* value = Field(body, field);
    if (value == nullptr) continue;
    if (chosen != nullptr && *chosen != *value) {
      return InvalidArgument("'max_tokens', 'max_completion_tokens' and 'n_predict' disagree");
    }
    chosen = value;
    name = field;
  }
  if (chosen == nullptr) return default_max_tokens;
  // llama.cpp's "no limit": until the context is full (kToContextEnd; the server knows where).
  if (std::string_view(name) == "n_predict" && chosen->is_number_integer() && chosen->get<int64_t>() == -1) {
    return kToContextEnd;
  }
  // Parsed from text, a non-negative integer is stored unsigned: anything else is out of range.
  const bool in_range =
      chosen->is_number_unsigned() && chosen->get<uint64_t>() >= 1 && chosen->get<uint64_t>() <= limit;
  if (!in_range) return InvalidArgument(FormatMessage("'%s' must be an integer in 1..%u", name, limit));
  return static_cast<uint32_t>(chosen->get<uint64_t>());
}

// An integer field in lo..hi (absent or null: `fallback`).
Result<int64_t> IntegerField(const Json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const Json* value = Field(body, name);
  if (value == nullptr) return fallback;
  const bool integer = value->is_number_integer();
  // Compared as unsigned when it is one (it may exceed int64's range); lo and hi are >= 0 there.
  const bool in_range =
      integer && (value->is_number_unsigned() ? (lo <= 0 || value->get<uint64_t>() >= static_cast<uint64_t>(lo)) &&
                                                    value->get<uint64_t>() <= static_cast<uint64_t>(hi)
                                              : value->get<int64_t>() >= lo && value->get<int64_t>() <= hi);
  if (!in_range) {
    return InvalidArgument(FormatMessage("'%s' must be an integer in %lld..%lld", name, static_cast<long long>(lo),
                                         static_cast<long long>(hi)));
  }
  return value->get<int64_t>();
}

// A number field (absent or null: unchanged); its range is CheckSamplingParams'.
Status NumberField(const Json& body, const char* name, float* out) {
  const Json* value = Field(body, name);
  if (value == nullptr) return Status::Ok();
  if (!value->is_number()) return InvalidArgument(std::string("'") + name + "' must be a number");
  const double v = value->get<double>();
  // Outside float's range it is out of every field's range: keep it so, rather than as inf.
  *out = v > std::numeric_limits<float>::max()    ? std::numeric_limits<float>::max()
         : v < -std::numeric_limits<float>::max() ? -std::numeric_limits<float>::max()
                                                  : static_cast<float>(v);
  return Status::Ok();
}

// `p`: the dialect's defaults, which the body's fields override.
Result<SamplingParams> Sampling(const Json& body, SamplingParams p) {
  RETURN_IF_ERROR(NumberField(body, "temperature", &p.temperature));
  RETURN_IF_ERROR(NumberField(body, "top_p", &p.top_p));
  RETURN_IF_ERROR(NumberField(body, "min_p", &p.min_p));
  RETURN_IF_ERROR(NumberField(body, "presence_penalty", &p.presence_penalty));
  RETURN_IF_ERROR(NumberField(body, "frequency_penalty", &p.frequency_penalty));
  ASSIGN_OR_RETURN(const int64_t top_k, IntegerField(body, "top_k", 0, std::numeric_limits<int32_t>::max(), p.top_k));
  p.top_k = static_cast<int32_t>(top_k);
  if (const Json* seed = Field(body, "seed"); seed != nullptr) {
    if (!seed->is_number_integer()) return InvalidArgument("'seed' must be an integer");
    // Any 64-bit integer, negative ones included, is a distinct seed.
    p.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }
  RETURN_IF_ERROR(CheckSamplingParams(p));
  return p;
}

// A string or up to kMaxStopStrings strings, none empty.
Result<std::vector<std::string>> StopStrings(const Json& body) {
  const Json* stop = Field(body, "stop");
  if (stop == nullptr) return std::vector<std::string>{};
  std::vector<std::string> out;
  if (stop->is_string()) {
    out.push_back(stop->get<std::string>());
  } else if (stop->is_array() && stop->size() <= kMaxStopStrings) {
    for (const Json& s : *stop) {
      if (!s.is_string()) return InvalidArgument("'stop' must be a string or an array of up to 4 strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    return InvalidArgument("'stop' must be a string or an array of up to 4 strings");
  }
  for (const std::string& s : out) {
    if (s.empty()) return InvalidArgument("'stop' strings must not be empty");
  }
  return out;
}

// completions: `logprobs` is the number of alternatives (0..20, null: none); chat: `logprobs` is
// a boolean and `top_logprobs` the number (which needs logprobs true).
Result<int32_t> Logprobs(const Json& body, bool chat) {
  const int64_t top_limit = kMaxTopLogprobs;
  if (!chat) {
    const Json* logprobs = Field(body, "logprobs");
    if (logprobs != nullptr && logprobs->is_boolean()) {
      if (!logprobs->get<bool>()) return -1;
      return InvalidArgument("completions take 'logprobs' as the number of alternatives per token (0..20)");
    }
    ASSIGN_OR_RETURN(const int64_t n, IntegerField(body, "logprobs", 0, top_limit, -1));
    return static_cast<int32_t>(n);
  }
  const Json* logprobs = Field(body, "logprobs");
  if (logprobs != nullptr && !logprobs->is_boolean()) return InvalidArgument("'logprobs' must be a boolean");
  const bool on = logprobs != nullptr && logprobs->get<bool>();
  ASSIGN_OR_RETURN(const int64_t top, IntegerField(body, "top_logprobs", 0, top_limit, 0));
  if (!on && Field(body, "top_logprobs") != nullptr && top > 0) {
    return InvalidArgument("'top_logprobs' needs 'logprobs': true");
  }
  return on ? static_cast<int32_t>(top) : -1;
}

// A string, an array of one string, token ids, or an array of one array of token ids.
Status ReadPrompt(const Json& body, CompletionRequest& r) {
  static const char* kShapes = "'prompt' must be a string, an array of one string, or an array of token ids";
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return InvalidArgument(kShapes);
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
    return Status::Ok();
  }
  if (!prompt->is_array()) return InvalidArgument(kShapes);
  if (prompt->size() == 1 && prompt->at(0).is_string()) {
    r.prompt = prompt->at(0).get<std::string>();
    return Status::Ok();
  }
  const Json& ids = prompt->size() == 1 && prompt->at(0).is_array() ? prompt->at(0) : *prompt;
  if (ids.empty()) return InvalidArgument(kShapes);
  r.prompt_tokens.reserve(ids.size());
  for (const Json& id : ids) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return InvalidArgument(kShapes);
    }
    r.prompt_tokens.push_back(static_cast<int32_t>(id.get<uint64_t>()));
  }
  r.prompt_is_tokens = true;
  return Status::Ok();
}

// llama-server's defaults for /completion (its common_params_sampling): a request that names
// no sampling settings gets the text llama-server would sample, not greedy text.
SamplingParams LlamaServerSampling() {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  return p;
}

// The roles a chat template knows. "tool" and "function" messages answer tool calls, which this
// server does not make.
bool KnownRole(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant";
}

Status ReadMessages(const Json& body, CompletionRequest& r) {
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty()) {
    return InvalidArgument("'messages' must be a non-empty array");
  }
  for (const Json& m : *messages) {
    const bool well_formed = m.is_object() && m.contains("role") && m.at("role").is_string() && m.contains("content");
    if (!well_formed) return InvalidArgument("each message needs string 'role' and 'content'");
    const std::string& role = m.at("role").get_ref<const std::string&>();
    if (role == "tool" || role == "function") {
      return InvalidArgument("'" + role + "' messages answer tool calls, which this server does not make");
    }
    if (!KnownRole(role)) {
      return InvalidArgument("a message's 'role' must be system, developer, user or assistant, not '" + role + "'");
    }
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content") continue;
      // "name" tells participants apart, which llama.cpp's chat templates do not render (nor does
      // llama-server); the rest are an assistant message's empty tool calls or refusal.
      if (key == "name" && value.is_string()) continue;
      if ((key == "tool_calls" || key == "refusal" || key == "function_call") &&
          (value.is_null() || (value.is_array() && value.empty()))) {
        continue;
      }
      return InvalidArgument("a message's '" + key + "' is not supported by this server");
    }
    ASSIGN_OR_RETURN(std::string content, ContentText(m.at("content")));
    r.messages.push_back({role, std::move(content)});
  }
  return Status::Ok();
}

// The fields each dialect knows: OpenAI's (chat or completions), and the llama.cpp server's that
// this server honours. Anything else is refused, as OpenAI refuses it.
bool KnownField(const std::string& name, RequestDialect dialect) {
  using Names = std::set<std::string, std::less<>>;
  static const Names kBoth = {
      "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "max_completion_tokens", "n",
      "presence_penalty", "seed", "stop", "stream", "stream_options", "temperature", "top_p", "user",
      // refused by name where they do not apply (RefuseUnsupported says why)
      "echo", "response_format", "tools", "tool_choice", "functions", "function_call", "best_of", "suffix",
      // llama.cpp's, which llama-server takes on its OpenAI endpoints too
      "top_k", "min_p", "n_predict", "cache_prompt"};
  static const Names kChat = {"messages", "top_logprobs",     "parallel_tool_calls", "store",
                              "metadata", "service_tier",     "modalities",          "prediction",
                              "audio",    "reasoning_effort", "web_search_options"};
  static const Names kCompletions = {"prompt"};
  static const Names kLlama = {"prompt",
                               "n_predict",
                               "max_tokens",
                               "temperature",
                               "top_k",
                               "top_p",
                               "min_p",
                               "stop",
                               "stream",
                               "stream_options",
                               "cache_prompt",
                               "seed",
                               "n_probs",
                               "presence_penalty",
                               "frequency_penalty",
                               "id_slot",
                               "return_tokens",
                               "n_keep",
                               "model"};
  switch (dialect) {
    case RequestDialect::kLlamaCompletion:
      return kLlama.contains(name);
    case RequestDialect::kChat:
      return kBoth.contains(name) || kChat.contains(name);
    case RequestDialect::kCompletions:
      return kBoth.contains(name) || kCompletions.contains(name);
  }
  return false;
}

// Fields a client may send whatever their value, because they change no answer: labels for the
// caller's own records, and a request to cache the prompt (this server reuses every prompt's KV).
Status CheckLabels(const Json& body) {
  if (const Json* user = Field(body, "user"); user != nullptr && !user->is_string()) {
    return InvalidArgument("'user' must be a string");
  }
  if (const Json* metadata = Field(body, "metadata"); metadata != nullptr && !metadata->is_object()) {
    return InvalidArgument("'metadata' must be an object");
  }
  for (const char* flag : {"store", "cache_prompt", "parallel_tool_calls"}) {
    if (const Json* value = Field(body, flag); value != nullptr && !value->is_boolean()) {
      return InvalidArgument(std::string("'") + flag + "' must be a boolean");
    }
  }
  if (const Json* tier = Field(body, "service_tier"); tier != nullptr && !tier->is_string()) {
    return InvalidArgument("'service_tier' must be a string");
  }
  // Chat fields for capabilities this server lacks (audio out, predicted outputs, reasoning
  // effort, web search): only their do-nothing values.
  if (const Json* modalities = Field(body, "modalities");
      modalities != nullptr && *modalities != Json::array({"text"})) {
    return InvalidArgument("'modalities' other than [\"text\"] is not supported by this server");
  }
  for (const char* field : {"prediction", "audio", "reasoning_effort", "web_search_options"}) {
    if (Field(body, field) != nullptr) {
      return InvalidArgument(std::string("'") + field + "' is not supported by this server");
    }
  }
  return Status::Ok();
}

// llama-server's /completion: n_probs alternatives per token (0: none), id_slot a slot or -1
// (this server picks the sequence itself, as llama-server does for -1), n_keep any.
Status ReadLlamaFields(const Json& body, CompletionRequest& r) {
  ASSIGN_OR_RETURN(const int64_t n_probs, IntegerField(body, "n_probs", 0, kMaxTopLogprobs, 0));
  r.logprobs = n_probs > 0 ? static_cast<int32_t>(n_probs) : -1;
  ASSIGN_OR_RETURN(const int64_t id_slot, IntegerField(body, "id_slot", -1, std::numeric_limits<int32_t>::max(), -1));
  (void)id_slot;
  ASSIGN_OR_RETURN(const int64_t n_keep, IntegerField(body, "n_keep", -1, std::numeric_limits<int32_t>::max(), 0));
  (void)n_keep;
  if (const Json* tokens = Field(body, "return_tokens"); tokens != nullptr) {
    if (!tokens->is_boolean()) return InvalidArgument("'return_tokens' must be a boolean");
    r.return_tokens = tokens->get<bool>();
  }
  return Status::Ok();
}

}  // namespace

Result<CompletionRequest> ParseCompletionRequest(std::string_view text, RequestDialect dialect,
                                                 const RequestLimits& limits, RequestFault* fault) {
  const bool chat = dialect == RequestDialect::kChat;
  const bool llama = dialect == RequestDialect::kLlamaCompletion;
  // Names the field a refusal is about (for the error's "param").
  const auto about = [fault]<typename T>(const std::string& param, T status_or_result, const char* code = "") {
    if (!status_or_result.ok() && fault != nullptr) *fault = {param, code};
    return status_or_result;
  };
  // Parsing without exceptions: a malformed body comes back discarded, never thrown.
  const Json body = Json::parse(text.begin(), text.end(), nullptr, false);
  if (body.is_discarded()) return InvalidArgument("the body is not valid JSON");
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
  for (const auto& [name, value] : body.items()) {
    if (KnownField(name, dialect)) continue;
    return about(name.c_str(),
                 InvalidArgument("unrecognized request argument supplied: '" + PrintableOneLine(name) + "'"),
                 "unknown_parameter");
  }
  CompletionRequest r;
  if (const Json* model = Field(body, "model"); model != nullptr) {
    if (!model->is_string()) return about("model", InvalidArgument("'model' must be a string"));
    r.model = model->get<std::string>();
  }
  RETURN_IF_ERROR(chat ? about("messages", ReadMessages(body, r)) : about("prompt", ReadPrompt(body, r)));
  RETURN_IF_ERROR(about("", RefuseUnsupported(body, chat)));
  RETURN_IF_ERROR(about("", CheckLabels(body)));
  ASSIGN_OR_RETURN(r.max_tokens,
                   about("max_tokens", MaxTokens(body, limits.default_max_tokens, limits.max_tokens_limit)));
  if (const Json* stream = Field(body, "stream"); stream != nullptr) {
    if (!stream->is_boolean()) return about("stream", InvalidArgument("'stream' must be a boolean"));
    r.stream = stream->get<bool>();
  }
  if (const Json* options = Field(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) return about("stream_options", InvalidArgument("'stream_options' must be an object"));
    if (const Json* usage = Field(*options, "include_usage"); usage != nullptr) {
      if (!usage->is_boolean()) {
        return about("stream_options", InvalidArgument("'stream_options.include_usage' must be a boolean"));
      }
      r.include_usage = usage->get<bool>();
    }
  }
  ASSIGN_OR_RETURN(r.sampling, about("", Sampling(body, llama ? LlamaServerSampling() : SamplingParams{})));
  ASSIGN_OR_RETURN(r.stop, about("stop", StopStrings(body)));
  const uint32_t max_n = std::max(1u, limits.max_n);
  ASSIGN_OR_RETURN(const int64_t n, about("n", IntegerField(body, "n", 1, max_n, 1)));
  r.n = static_cast<uint32_t>(n);
  if (llama) {
    RETURN_IF_ERROR(about("", ReadLlamaFields(body, r)));
    return r;
  }
  ASSIGN_OR_RETURN(r.logprobs, about("logprobs", Logprobs(body, chat)));
  if (!chat) {
    if (const Json* echo = Field(body, "echo"); echo != nullptr) {
      if (!echo->is_boolean()) return about("echo", InvalidArgument("'echo' must be a boolean"));
      r.echo = echo->get<bool>();
    }
    // The prompt's own log-probabilities would need its logits, which a restored prefix never had.
    if (r.echo && r.logprobs >= 0) {
      return about("echo", InvalidArgument("'echo' with 'logprobs' is not supported by this server"));
    }
  }
  return r;
}

Status CheckPromptCanFit(size_t prompt_bytes, uint32_t max_tokens, uint32_t n_ctx, size_t max_token_bytes) {
  if (max_token_bytes == 0) return Status::Ok();
  const uint64_t at_least = prompt_bytes / max_token_bytes + (prompt_bytes % max_token_bytes != 0 ? 1 : 0);
  if (at_least + max_tokens <= n_ctx) return Status::Ok();
  return InvalidArgument(FormatMessage(
      "the prompt (%zu bytes, so at least %llu tokens) plus max_tokens (%u) exceed the context of %u tokens",
      prompt_bytes, static_cast<unsigned long long>(at_least), max_tokens, n_ctx));
}

}  // namespace kvc
