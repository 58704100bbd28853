#include "serve/completion_server.h"

#include <httplib.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/utf8.h"
#include "llama/llama_session.h"
#include "llama/model_files.h"
#include "reuse/reuse_setup.h"
#include "serve/batch_scheduler.h"
#include "serve/completion_request.h"
#include "serve/http_server.h"
#include "serve/llama_server_response.h"
#include "serve/openai_response.h"
#include "serve/request_guard.h"
#include "serve/slot_record.h"
#include "store/reconnecting_store.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

// The /metrics endpoint label of a path ("" for the paths not counted: /health, /metrics and
// paths no endpoint serves). llama-server's unprefixed paths count as their /v1/ twins.
std::string Endpoint(const std::string& path) {
  if (path == "/v1/completions" || path == "/completions") return "completions";
  if (path == "/v1/chat/completions" || path == "/chat/completions") return "chat";
  if (path == "/completion") return "completion";
  if (path == "/v1/models" || path == "/models" || path.starts_with("/v1/models/")) return "models";
  if (path == "/tokenize") return "tokenize";
  if (path == "/detokenize") return "detokenize";
  if (path == "/props") return "props";
  if (path == "/slots" || path.starts_with("/slots/")) return "slots";
  if (path == "/apply-template") return "apply_template";
  if (path == "/v1/embeddings" || path == "/embeddings" || path == "/embedding") return "embeddings";
  return "";
}

// A response id no other response of this or any other run of the server has: OpenAI's are
// random, and a client or a log that keys on ids (a cache, a tracing system) must not see one
// twice after a restart.
std::string ResponseId(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 random{[] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }()};
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = prefix;
  std::lock_guard lock(mu);
  for (int i = 0; i < 24; ++i) id += kAlphabet[random() % (sizeof kAlphabet - 1)];
  return id;
}

// How often a thread waiting for a generation looks at its client.
constexpr std::chrono::milliseconds kClientCheck{100};

// Cancels a submitted request unless it was handed on: a handler that throws between Submit and
// the end of its answer must not leave the request generating for nobody.
struct CancelOnExit {
  std::shared_ptr<ServeRequest> request;
  ~CancelOnExit() {
    if (request) request->Cancel();
  }
};

}  // namespace

struct CompletionServer::Impl {
  ServerOptions o;
  RequestGuard request_guard;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<CalibrationRegistry> calibrations;
  std::unique_ptr<ReconnectingStore> store;  // may be down: requests then recompute
  std::unique_ptr<LlamaSession> session;
  std::string model_name;
  std::string chat_template;             // empty: "role: content" lines (PlainChatPrompt)
  std::string system_fingerprint;        // every response's (ResponseHead)
  int64_t created = 0;                   // when the model was loaded (Unix seconds), /v1/models' "created"
  std::vector<StoredRung> stored_rungs;  // what new chunks are stored as
  ServeMetrics metrics;
  std::unique_ptr<BatchScheduler> scheduler;
  std::unique_ptr<HttpServer> http;
  std::thread listener;
  int bound_port = 0;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  std::string MetricsText() {
    std::string out = metrics.Text();
    const BatchScheduler::Gauges g = scheduler->gauges();
    WriteMetricFamily(out, "kvcodec_queue_length", "gauge", "Requests in each queue of the scheduler now.");
    out += FormatMessage("kvcodec_queue_length{queue=\"waiting_for_kv\"} %d\n", g.waiting_for_kv);
    out += FormatMessage("kvcodec_queue_length{queue=\"waiting\"} %d\n", g.waiting);
    out += FormatMessage("kvcodec_queue_length{queue=\"running\"} %d\n", g.running);
    out += FormatMessage("kvcodec_queue_length{queue=\"store\"} %d\n", g.store_pending);
    WriteMetricFamily(out, "kvcodec_memory_tier_bytes", "gauge",
                      "Bytes of decoded KV chunks the host-memory tier holds (--cache-ram is its limit).");
    out += FormatMessage("kvcodec_memory_tier_bytes %llu\n", static_cast<unsigned long long>(g.memory_bytes));
    WriteMetricFamily(out, "kvcodec_memory_tier_chunks", "gauge", "Chunks (and tails) the host-memory tier holds.");
    out += FormatMessage("kvcodec_memory_tier_chunks %llu\n", static_cast<unsigned long long>(g.memory_chunks));
    const StoreHealth health = store->health();
    WriteMetricFamily(out, "kvcodec_store_up", "gauge",
                      "1 while the KV store answers; 0 while it is down (requests recompute, reconnects back off).");
    out += FormatMessage("kvcodec_store_up %d\n", health.up ? 1 : 0);
    WriteMetricFamily(out, "kvcodec_store_errors_total", "counter",
                      "I/O errors of the KV store: failed calls and failed reconnect attempts.");
    out += FormatMessage("kvcodec_store_errors_total %llu\n", static_cast<unsigned long long>(health.errors));
    WriteMetricFamily(out, "kvcodec_store_reconnects_total", "counter",
                      "Times the KV store came back after being down.");
    out += FormatMessage("kvcodec_store_reconnects_total %llu\n", static_cast<unsigned long long>(health.reconnects));
    if (auto stats = store->Stats(); stats.ok()) {
      WriteMetricFamily(out, "kvcodec_store_bytes", "gauge", "Bytes held by the KV store.");
      out += FormatMessage("kvcodec_store_bytes %llu\n", static_cast<unsigned long long>(stats->bytes));
      WriteMetricFamily(out, "kvcodec_store_objects", "gauge", "Objects held by the KV store.");
      out += FormatMessage("kvcodec_store_objects %llu\n", static_cast<unsigned long long>(stats->objects));
    }
    return out;
  }

  // GET /health: 200 and "ok" while the server answers requests, which it does with the store
  // down too (by recomputing); "store" says whether reuse works, and why not.
  std::string HealthText() const {
    const StoreHealth h = store->health();
    Json s = {{"url", PrintableOneLine(h.url)}, {"up", h.up}};
    if (!h.up) {
      s["error"] = h.last_error;
      s["down_s"] = h.down_s;
      s["retry_in_s"] = h.retry_in_s;
      s["consecutive_failures"] = h.consecutive_failures;
    }
    return DumpJson(Json{{"status", "ok"}, {"store", std::move(s)}});
  }

  // A checked request: what it asks for, its prompt as tokens, and the prompt's text (for echo).
  struct CheckedRequest {
    CompletionRequest request;
    std::vector<int32_t> tokens;
    std::string prompt_text;
  };

  // The request checked and its prompt tokenized; the error is a 400's message (a 404 for a
  // model this server does not serve), and `fault` names the field at fault. A prompt that
  // cannot fit is rejected by its length before the tokenizer spends time on it.
  Result<CheckedRequest> ReadRequest(const std::string& body, RequestDialect dialect, RequestFault* fault) {
    const bool chat = dialect == RequestDialect::kChat;
    const RequestLimits limits{o.default_max_tokens, o.n_ctx, static_cast<uint32_t>(o.parallel)};
    CheckedRequest out;
    ASSIGN_OR_RETURN(out.request, ParseCompletionRequest(body, dialect, limits, fault));
    CompletionRequest& r = out.request;
    // A client that names another model must not get this one's answer under that name.
    if (!r.model.empty() && r.model != model_name && r.model != o.model_path) {
      *fault = {"model", "model_not_found"};
      return NotFound("the model '" + PrintableOneLine(r.model) + "' does not exist: this server serves '" +
                      model_name + "' (GET /v1/models)");
    }
    const RequestFault too_long{chat ? "messages" : "prompt", "context_length_exceeded"};
    if (r.prompt_is_tokens) {
      const uint32_t n_vocab = model->info().n_vocab;
      for (const int32_t id : r.prompt_tokens) {
        if (id < 0 || static_cast<uint32_t>(id) >= n_vocab) {
          *fault = {"prompt", "invalid_value"};
          return InvalidArgument(FormatMessage("token id %d is not in the model's vocabulary of %u", id, n_vocab));
        }
      }
      out.tokens = std::move(r.prompt_tokens);
      if (r.echo || dialect == RequestDialect::kLlamaCompletion) out.prompt_text = DetokenizedText(out.tokens);
    } else {
      if (!model->has_tokenizer()) return InvalidArgument(NoTokenizerMessage());
      bool templated = false;
      if (chat) {
        ASSIGN_OR_RETURN(const ChatPrompt prompt, FormatChat(r.messages));
        r.prompt = prompt.text;
        templated = prompt.templated;
      }
      if (Status fits = CheckPromptCanFit(r.prompt.size(), r.max_tokens, o.n_ctx, model->max_token_bytes());
          !fits.ok()) {
        *fault = too_long;
        return fits;
      }
      // A template's own markers ("<|im_start|>") are its special tokens; the user's text never is.
      ASSIGN_OR_RETURN(out.tokens, model->Tokenize(r.prompt, true, templated));
      const bool starts_with_bos = model->has_bos() && !out.tokens.empty() && out.tokens.front() == model->bos_token();
      if (out.tokens.size() <= (starts_with_bos ? 1u : 0u)) return InvalidArgument("the prompt is empty");
      if (r.echo || dialect == RequestDialect::kLlamaCompletion) out.prompt_text = r.prompt;
    }
    if (out.tokens.empty()) return InvalidArgument("the prompt is empty");
    if (r.max_tokens == kToContextEnd) {
      if (out.tokens.size() >= o.n_ctx) {
        *fault = too_long;
        return InvalidArgument(FormatMessage("the prompt (%zu tokens) leaves no room in the context of %u tokens",
                                             out.tokens.size(), o.n_ctx));
      }
      r.max_tokens = o.n_ctx - static_cast<uint32_t>(out.tokens.size());
    }
    if (out.tokens.size() + r.max_tokens > o.n_ctx) {
      *fault = too_long;
      return InvalidArgument(FormatMessage("prompt (%zu tokens) plus max_tokens (%u) exceed the context of %u tokens",
                                           out.tokens.size(), r.max_tokens, o.n_ctx));
    }
    return out;
  }

  // A chat's prompt: the messages through the chat template (or "role: content" lines).
  struct ChatPrompt {
    std::string text;
    bool templated = false;
  };
  Result<ChatPrompt> FormatChat(const std::vector<ChatMessage>& messages) const {
    if (chat_template.empty()) return ChatPrompt{PlainChatPrompt(messages), false};
    for (const ChatMessage& m : messages) {
      if (m.content.find('\0') != std::string::npos || m.role.find('\0') != std::string::npos) {
        return InvalidArgument("a message holds a NUL character, which a chat template cannot carry");
      }
    }
    ASSIGN_OR_RETURN(std::string text, LlamaModel::ApplyChatTemplate(chat_template, messages));
    return ChatPrompt{std::move(text), true};
  }

  // Said to a client instead of LlamaModel::Tokenize's error, which names the server's file.
  std::string NoTokenizerMessage() const {
    return "model " + model_name +
           " has no tokenizer: it reads and writes token ids only (give /v1/completions a prompt of token ids)";
  }

  // The text tokens spell, as valid UTF-8 (a character a byte-fallback vocabulary spells over
  // several tokens is joined whole).
  std::string DetokenizedText(std::span<const int32_t> tokens) const { return ToValidUtf8(model->Detokenize(tokens)); }

  void Reply(httplib::Response& res, const std::string& endpoint, int status, const std::string& message,
             const RequestFault& fault = {}) {
    res.status = status;
    res.set_content(ErrorJson({message, ErrorType(status), fault.param, fault.code}), "application/json");
    metrics.CountRequest(endpoint, std::to_string(status));
  }

  // Every POST endpoint reads its body here. False: the refusal is answered (and counted).
  bool ReadBody(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                const std::string& endpoint, std::string* body) {
    const std::optional<BodyRefusal> refusal = request_guard.ReadBody(req, res, reader, body);
    if (!refusal) return true;
    Reply(res, endpoint, refusal->status, refusal->message);
    return false;
  }

  // POST /tokenize, as llama.cpp's server has it: {"content", "add_special" (false),
  // "parse_special" (true), "with_pieces" (false)} -> {"tokens": [id | {"id", "piece"}]}; a piece
  // that is not valid UTF-8 (part of a character) comes as its bytes.
  void HandleTokenize(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string text;
    if (!ReadBody(req, res, reader, "tokenize", &text)) return;
    const Json body = Json::parse(text, nullptr, false);
    text = std::string();
    auto flag = [&](const char* name, bool fallback) -> std::optional<bool> {
      if (!body.contains(name) || body[name].is_null()) return fallback;
      if (!body[name].is_boolean()) return std::nullopt;
      return body[name].get<bool>();
    };
    const auto add_special = flag("add_special", false), parse_special = flag("parse_special", true),
               with_pieces = flag("with_pieces", false);
    if (body.is_discarded() || !body.is_object() || !body.contains("content") || !body["content"].is_string() ||
        !add_special || !parse_special || !with_pieces) {
      Reply(res, "tokenize", 400,
            "the body must be {\"content\": string} with optional boolean add_special, parse_special, with_pieces");
      return;
    }
    if (!model->has_tokenizer()) {
      Reply(res, "tokenize", 400, NoTokenizerMessage());
      return;
    }
    auto tokens = model->Tokenize(body["content"].get_ref<const std::string&>(), *add_special, *parse_special);
    if (!tokens.ok()) {
      Reply(res, "tokenize", 500, tokens.status().ToString());
      return;
    }
    Json out = Json::array();
    for (const int32_t t : *tokens) {
      if (!*with_pieces) {
        out.push_back(t);
        continue;
      }
      const std::string piece = model->TokenText(t);
      out.push_back({{"id", t}, {"piece", IsValidUtf8(piece) ? Json(piece) : TokenBytes(piece)}});
    }
    res.set_content(DumpJson(Json{{"tokens", std::move(out)}}), "application/json");
    metrics.CountRequest("tokenize", "200");
  }

  // POST /detokenize: {"tokens": [ids]} -> {"content": their text, as valid UTF-8}.
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string text;
    if (!ReadBody(req, res, reader, "detokenize", &text)) return;
    const Json body = Json::parse(text, nullptr, false);
    text = std::string();
    const bool shaped =
        !body.is_discarded() && body.is_object() && body.contains("tokens") && body["tokens"].is_array();
    std::vector<int32_t> tokens;
    bool valid = shaped;
    if (shaped) {
      for (const Json& t : body["tokens"]) {
        valid = valid && t.is_number_unsigned() && t.get<uint64_t>() < model->info().n_vocab;
        if (valid) tokens.push_back(static_cast<int32_t>(t.get<uint64_t>()));
      }
    }
    if (!valid) {
      Reply(res, "detokenize", 400,
            FormatMessage("the body must be {\"tokens\": [ids in 0..%u]}", model->info().n_vocab - 1));
      return;
    }
    if (!model->has_tokenizer()) {
      Reply(res, "detokenize", 400, NoTokenizerMessage());
      return;
    }
    res.set_content(DumpJson(Json{{"content", DetokenizedText(tokens)}}), "application/json");
    metrics.CountRequest("detokenize", "200");
  }

  // What a response needs to know of its request.
  struct Answer {
    ResponseHead head;
    RequestDialect dialect = RequestDialect::kCompletions;
    std::string endpoint;
    std::string echo;  // completions: the prompt's text, which starts each choice's text
    bool logprobs = false;
    bool include_usage = false;
    // /completion: what its answer repeats of the request.
    std::shared_ptr<const CompletionRequest> request;
    std::string prompt_text;
    uint32_t prompt_tokens = 0;
    bool native() const { return dialect == RequestDialect::kLlamaCompletion; }
  };

  Json LogprobsJson(const Answer& a, const std::vector<TokenLogprob>& tokens) const {
    return LogprobsObject(a.head.chat, tokens, a.echo.size());
  }

  // POST /v1/completions, /v1/chat/completions (and llama-server's unprefixed /chat/completions):
  // OpenAI's; POST /completion and /completions: llama-server's native answer.
  void HandleCompletion(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                        RequestDialect dialect) {
    Answer a;
    a.dialect = dialect;
    a.head.chat = dialect == RequestDialect::kChat;
    a.endpoint = Endpoint(req.path);
    std::string body;
    if (!ReadBody(req, res, reader, a.endpoint, &body)) return;
    RequestFault fault;
    auto read = ReadRequest(body, dialect, &fault);
    body = std::string();
    if (!read.ok()) {
      Reply(res, a.endpoint, read.status().code() == StatusCode::kNotFound ? 404 : 400, read.status().message(), fault);
      return;
    }
    const CompletionRequest& r = read->request;
    a.head.id = ResponseId(a.head.chat ? "chatcmpl-" : "cmpl-");
    a.head.created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    a.head.model = model_name;
    a.head.system_fingerprint = system_fingerprint;
    a.echo = a.native() ? std::string() : read->prompt_text;
    a.logprobs = r.logprobs >= 0;
    a.include_usage = r.include_usage;
    a.prompt_tokens = static_cast<uint32_t>(read->tokens.size());
    if (a.native()) {
      a.prompt_text = std::move(read->prompt_text);
      a.request = std::make_shared<const CompletionRequest>(r);
    }
    GenerationOptions g{r.max_tokens, r.n, r.sampling, r.stop, r.logprobs};
    auto request = std::make_shared<ServeRequest>(std::move(read->tokens), std::move(g));
    CancelOnExit guard{request};
    scheduler->Submit(request);

    if (!r.stream) {
      // Waits for the whole text, looking at the client meanwhile: one that has gone cancels
      // its request, which frees its sequences at the engine's next step.
      std::vector<std::string> texts(r.n, a.echo);
      std::vector<std::vector<TokenLogprob>> logprobs(r.n);
      std::vector<int32_t> tokens;
      Piece piece;
      auto checked = SteadyClock::now();
      for (;;) {
        const ServeRequest::Next next = request->NextPiece(&piece, kClientCheck);
        if (next == ServeRequest::Next::kEnd) break;
        if (next == ServeRequest::Next::kPiece && piece.choice < r.n) {
          texts[piece.choice] += piece.text;
          for (TokenLogprob& t : piece.logprobs) logprobs[piece.choice].push_back(std::move(t));
          if (piece.choice == 0 && r.return_tokens)
            tokens.insert(tokens.end(), piece.tokens.begin(), piece.tokens.end());
        }
        if (SteadyClock::now() - checked < kClientCheck) continue;
        checked = SteadyClock::now();
        if (!ClientConnected()) {
          request->Cancel();
          if (HttpConnection* c = CurrentHttpConnection(); c != nullptr) c->close = true;
          Reply(res, a.endpoint, 499, "the client closed the connection");
          return;
        }
      }
      const Status& s = request->status();
      const Generation& gen = request->generation();
      if (!s.ok()) {
        Reply(res, a.endpoint, s.code() == StatusCode::kInvalidArgument ? 400 : 500, s.ToString());
        return;
      }
      Json out;
      if (a.native()) {
        NativeCompletion c{texts[0],          std::move(tokens),      model_name, a.prompt_text, gen.finish_reasons[0],
                           gen.stop_words[0], std::move(logprobs[0]), a.logprobs};
        out = NativeCompletionObject(c, r, gen, o.n_ctx);
      } else {
        Json choices = Json::array();
        for (uint32_t i = 0; i < r.n; ++i) {
          choices.push_back(CompletionChoice(a.head.chat, i, texts[i], gen.finish_reasons[i],
                                             a.logprobs ? LogprobsJson(a, logprobs[i]) : Json(nullptr)));
        }
        out = CompletionObject(a.head, std::move(choices), UsageObject(gen));
        out["timings"] = CompletionTimings(gen);  // llama-server's extension, which its clients read
      }
      res.set_content(DumpJson(out) + "\n", "application/json");  // a newline for terminals (curl)
      metrics.CountRequest(a.endpoint, "200");                    // counted once the answer exists
      return;
    }

    // Server-sent events, as OpenAI sends them: a chunk per piece of a choice's text as the
    // engine produces it, a chunk per choice with its finish reason, a chunk with the usage and
    // no choices if the request asked for it, then [DONE] (llama-server's /completion: an event
    // per piece, then its whole answer's fields with empty content, and no [DONE]). A client
    // that goes away cancels the request, which frees its sequences at the engine's next step.
    // This runs after the handler has returned, outside httplib's exception guard: nothing may
    // leave it.
    const uint32_t n = r.n;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, request, a, n](size_t, httplib::DataSink& sink) {
          bool counted = false;
          auto count = [&](const char* status) {
            if (!counted) metrics.CountRequest(a.endpoint, status);
            counted = true;
          };
          try {
            return SendEvents(*request, a, n, sink, count);
          } catch (...) {
            KVC_LOG_ERROR("streaming a completion: %s", ExceptionText(std::current_exception()).c_str());
            request->Cancel();
            count("500");
            return false;
          }
        },
        [request](bool success) {
          if (!success) request->Cancel();
        });
    guard.request = nullptr;  // the provider (or its releaser) owns the request's end now
  }

  template <typename Count>
  bool SendEvents(ServeRequest& request, const Answer& a, uint32_t n, httplib::DataSink& sink, Count& count) {
    auto event = [&](const Json& j) {
      const std::string line = "data: " + DumpJson(j) + "\n\n";
      return sink.is_writable() && sink.write(line.data(), line.size());
    };
    // Each choice's first chat delta names the role, as OpenAI's do.
    std::vector<bool> role_sent(n, false);
    auto delta = [&](uint32_t index, const std::string& text, const std::vector<TokenLogprob>* logprobs,
                     const Json& finish) {
      std::optional<Json> logprobs_field;
      if (a.logprobs) logprobs_field = logprobs != nullptr ? LogprobsJson(a, *logprobs) : Json(nullptr);
      const bool first = a.head.chat && !role_sent[index];
      if (first) role_sent[index] = true;
      return ChunkObject(
          a.head, Json::array({ChunkChoice(a.head.chat, index, text, first, finish, std::move(logprobs_field))}));
    };
    auto gone = [&] {
      request.Cancel();
      count("499");
      return false;
    };
    if (!a.echo.empty()) {
      for (uint32_t i = 0; i < n; ++i) {
        if (!event(delta(i, a.echo, nullptr, nullptr))) return gone();
      }
    }
    uint32_t predicted = 0;
    std::string text;  // /completion: the answer's text so far (its last event's has_new_line)
    std::vector<TokenLogprob> probabilities;
    Piece piece;
    auto checked = SteadyClock::now();
    for (;;) {
      const ServeRequest::Next next = request.NextPiece(&piece, kClientCheck);
      if (next == ServeRequest::Next::kEnd) break;
      if (next == ServeRequest::Next::kPiece) {
        checked = SteadyClock::now();
        if (piece.choice >= n) continue;
        bool sent = true;
        if (a.native()) {
          predicted += static_cast<uint32_t>(piece.tokens.size());
          text += piece.text;
          Json chunk = NativeCompletionChunk(piece.text, piece.tokens, predicted, a.prompt_tokens);
          if (a.logprobs) chunk["completion_probabilities"] = TokenLogprobEntries(piece.logprobs);
          sent = event(chunk);
        } else if (!piece.text.empty() || !piece.logprobs.empty()) {
          sent = event(delta(piece.choice, piece.text, &piece.logprobs, nullptr));
        }
        if (!sent) return gone();
        continue;
      }
      // No text for a while (queued, fetching, prefilling): is anyone still waiting for it?
      if (SteadyClock::now() - checked < kClientCheck) continue;
      checked = SteadyClock::now();
      if (!ClientConnected()) return gone();
    }
    const Status& s = request.status();
    const Generation& g = request.generation();
    if (!s.ok()) {
      count("500");
      event(ErrorObject({s.ToString(), "server_error"}));
    } else if (a.native()) {
      NativeCompletion c{"", {}, model_name, a.prompt_text, g.finish_reasons[0], g.stop_words[0], {}, false};
      Json last = NativeCompletionObject(c, *a.request, g, o.n_ctx);
      last["has_new_line"] = text.find('\n') != std::string::npos;
      event(last);
      count("200");
    } else {
      bool sent = true;
      for (uint32_t i = 0; i < n && sent; ++i) {
        Json finish = delta(i, "", nullptr, g.finish_reasons[i]);
        if (i + 1 == n) finish["timings"] = CompletionTimings(g);  // where llama-server sends them
        sent = event(finish);
      }
      if (sent && a.include_usage) {
        Json last = ChunkObject(a.head, Json::array());
        last["usage"] = UsageObject(g);
        sent = event(last);
      }
      const std::string done = "data: [DONE]\n\n";
      if (sent && sink.is_writable()) sink.write(done.data(), done.size());
      count("200");
    }
    sink.done();
    return true;
  }

  // What a request that sets nothing generates with (/props, /slots).
  Json DefaultGenerationSettings() const {
    CompletionRequest defaults;
    defaults.max_tokens = o.default_max_tokens;
    return GenerationSettings(defaults, o.n_ctx);
  }

  // GET /props: llama-server's server properties, those this server has.
  Json Props() const {
    return {{"default_generation_settings", {{"n_ctx", o.n_ctx}, {"params", DefaultGenerationSettings()}}},
            {"total_slots", o.parallel},
            {"model_alias", model_name},
            {"model_path", ToValidUtf8(o.model_path)},
            {"modalities", {{"vision", false}, {"audio", false}}},
            {"chat_template", ToValidUtf8(chat_template)},
            {"bos_token", model->has_bos() ? ToValidUtf8(model->TokenText(model->bos_token())) : ""},
            {"eos_token", ""},
            {"build_info", std::string("kvcodec ") + KVCODEC_VERSION},
            {"endpoint_slots", true},
            {"endpoint_props", false},
            {"endpoint_metrics", true},
            {"slot_save_path", ToValidUtf8(o.slot_save_path)}};
  }

  void HandleSlots(httplib::Response& res) {
    const Json params = DefaultGenerationSettings();
    Json out = Json::array();
    const std::vector<BatchScheduler::SequenceView> views = scheduler->Sequences();
    for (size_t i = 0; i < views.size(); ++i)
      out.push_back(SlotObject(static_cast<int32_t>(i), o.n_ctx, views[i], params));
    res.set_content(DumpJson(out), "application/json");
    metrics.CountRequest("slots", "200");
  }

  // POST /slots/{id}?action=save|restore|erase, as llama-server's: a saved slot is a record of
  // the tokens its sequence holds (their KV is in the chunk store already); a restore fetches
  // that KV into a free sequence, which the next request with that prefix continues.
  void HandleSlotAction(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string text;
    if (!ReadBody(req, res, reader, "slots", &text)) return;
    const std::string id_text = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
    int32_t id = -1;
    if (id_text.size() <= 6 && !id_text.empty() &&
        std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      id = std::stoi(id_text);
    }
    if (id < 0 || id >= o.parallel) {
      Reply(res, "slots", 400,
            FormatMessage("no slot %s: this server has slots 0..%d", PrintableOneLine(id_text).c_str(), o.parallel - 1),
            {"id_slot", "invalid_value"});
      return;
    }
    const std::string action = req.get_param_value("action");
    if (action == "erase") {
      const uint32_t erased = scheduler->EraseSequence(id);
      res.set_content(DumpJson(Json{{"id_slot", id}, {"n_erased", erased}}), "application/json");
      metrics.CountRequest("slots", "200");
      return;
    }
    if (action != "save" && action != "restore") {
      Reply(res, "slots", 400, "the action must be save, restore or erase", {"action", "invalid_value"});
      return;
    }
    if (o.slot_save_path.empty()) {
      Reply(res, "slots", 501, "slot save and restore are off: start the server with --slot-save-path",
            {"action", "not_supported"});
      return;
    }
    if (!o.reuse) {
      Reply(res, "slots", 501, "slot save and restore need reuse (the server runs with --no-reuse)",
            {"action", "not_supported"});
      return;
    }
    const Json body = Json::parse(text, nullptr, false);
    const bool named =
        !body.is_discarded() && body.is_object() && body.contains("filename") && body["filename"].is_string();
    const std::string filename = named ? body["filename"].get<std::string>() : "";
    if (Status valid = named ? CheckSlotFileName(filename) : InvalidArgument("the body must be {\"filename\": string}");
        !valid.ok()) {
      Reply(res, "slots", 400, valid.message(), {"filename", "invalid_value"});
      return;
    }
    const std::string object = SlotRecordObjectName(model->fingerprint(), filename);
    const auto t0 = SteadyClock::now();
    if (action == "save") {
      const std::vector<BatchScheduler::SequenceView> views = scheduler->Sequences();
      const BatchScheduler::SequenceView& view = views[static_cast<size_t>(id)];
      if (view.processing) {
        Reply(res, "slots", 409, FormatMessage("slot %d is processing a request", id), {"id_slot", "slot_busy"});
        return;
      }
      // Its chunks are queued for the store when its request finished: saved once they are in.
      scheduler->WaitForStores();
      const std::vector<uint8_t> record = SerializeSlotRecord({model->fingerprint(), view.held});
      if (Status put = store->Put(object, record); !put.ok()) {
        Reply(res, "slots", 500, "saving the slot failed: " + put.ToString());
        return;
      }
      res.set_content(DumpJson(Json{{"id_slot", id},
                                    {"filename", filename},
                                    {"n_saved", view.held.size()},
                                    {"n_written", record.size()},
                                    {"timings", {{"save_ms", SecondsSince(t0) * 1e3}}}}),
                      "application/json");
      metrics.CountRequest("slots", "200");
      return;
    }
    auto bytes = store->Get(object, uint64_t{kMaxSlotRecordTokens} * 4 + 64);
    if (!bytes.ok()) {
      const bool missing = bytes.status().code() == StatusCode::kNotFound;
      Reply(res, "slots", missing ? 404 : 500,
            missing ? "no slot file '" + PrintableOneLine(filename) + "' is saved for this model"
                    : "reading the slot file failed: " + bytes.status().ToString(),
            {"filename", missing ? "not_found" : ""});
      return;
    }
    auto record = ParseSlotRecord(*bytes);
    if (!record.ok()) {
      Reply(res, "slots", 500, "the slot file is damaged: " + record.status().ToString());
      return;
    }
    const uint32_t n_vocab = model->info().n_vocab;
    const bool fits = record->tokens.size() + 1 <= o.n_ctx &&
                      std::all_of(record->tokens.begin(), record->tokens.end(),
                                  [&](int32_t t) { return static_cast<uint32_t>(t) < n_vocab; });
    if (record->model != model->fingerprint() || !fits) {
      Reply(res, "slots", 400, "the slot file does not fit this model and context", {"filename", "invalid_value"});
      return;
    }
    uint64_t read_bytes = bytes->size();
    const size_t n_restored = record->tokens.size();
    if (n_restored > 0) {
      // Restored as a request would be (its stored prefix fetched, the rest prefilled) that
      // generates one greedy token; the sequence keeps the KV for the next request.
      auto request = std::make_shared<ServeRequest>(std::move(record->tokens), GenerationOptions{1, 1, {}, {}, -1});
      CancelOnExit guard{request};
      scheduler->Submit(request);
      Piece piece;
      while (request->NextPiece(&piece, std::chrono::milliseconds(1000)) != ServeRequest::Next::kEnd) {
      }
      guard.request = nullptr;
      if (!request->status().ok()) {
        Reply(res, "slots", 500, "restoring the slot failed: " + request->status().ToString());
        return;
      }
      read_bytes += request->generation().fetched_bytes;
    }
    res.set_content(DumpJson(Json{{"id_slot", id},
                                  {"filename", filename},
                                  {"n_restored", n_restored},
                                  {"n_read", read_bytes},
                                  {"timings", {{"restore_ms", SecondsSince(t0) * 1e3}}}}),
                    "application/json");
    metrics.CountRequest("slots", "200");
  }

  // POST /apply-template: {"messages"} -> {"prompt"}, the text a chat request would prefill.
  void HandleApplyTemplate(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string text;
    if (!ReadBody(req, res, reader, "apply_template", &text)) return;
    const Json body = Json::parse(text, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("messages")) {
      Reply(res, "apply_template", 400, "the body must be {\"messages\": [...]}", {"messages", "invalid_value"});
      return;
    }
    // The messages as a chat request's: same checks, same refusals.
    Json chat = {{"messages", body["messages"]}};
    RequestFault fault;
    auto parsed = ParseCompletionRequest(DumpJson(chat), RequestDialect::kChat, {1, 1, 1}, &fault);
    auto prompt = parsed.ok() ? FormatChat(parsed->messages) : Result<ChatPrompt>(parsed.status());
    if (!prompt.ok()) {
      Reply(res, "apply_template", 400, prompt.status().message(), fault);
      return;
    }
    res.set_content(DumpJson(Json{{"prompt", ToValidUtf8(prompt->text)}}), "application/json");
    metrics.CountRequest("apply_template", "200");
  }
};

int ServerLlamaThreads(const ServerOptions& o) {
  if (o.threads > 0) return o.threads;
  // The fetch threads' cores are theirs: llama.cpp's threads wait for each other at every step,
  // so one preempted by a chunk's decode would stall the whole batch.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores - (o.reuse ? o.fetch_threads : 0));
}

Result<ServerOptions::Scheduler> ParseScheduler(const std::string& name) {
  if (name == "kv-aware") return ServerOptions::Scheduler::kKvAware;
  if (name == "fifo") return ServerOptions::Scheduler::kFifo;
  return InvalidArgument("unknown scheduler '" + name + "' (kv-aware or fifo)");
}

const char* SchedulerName(ServerOptions::Scheduler scheduler) {
  return scheduler == ServerOptions::Scheduler::kFifo ? "fifo" : "kv-aware";
}

CompletionServer::CompletionServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CompletionServer::~CompletionServer() { Stop(); }

namespace {

// What the first restore in a fresh process would otherwise pay on its own time to first token:
// every page of a prefix-sized buffer faulted in for the first time (a few microseconds each
// where page faults trap to a hypervisor: tens of milliseconds for a few MB of KV). A restore of
// a zero KV as long as a sequence (at most kWarmUpBytes) maps the state blob the session keeps,
// and buffers of that size, allocated, touched and freed, leave the allocator serving later ones
// of up to that size from pages already mapped. Best effort: a failure only leaves it cold.
void WarmUpRestores(const LlamaModel& model, LlamaSession& session) {
  constexpr uint64_t kWarmUpBytes = uint64_t{32} << 20;
  const uint64_t per_token = model.info().KvShapeOf(1).fp16_bytes();
  if (per_token == 0) return;
  const auto tokens = static_cast<uint32_t>(std::min<uint64_t>(session.options().n_ctx, kWarmUpBytes / per_token));
  if (tokens == 0) return;
  // Only a memory that is one KV cache takes a KvCache (llama.cpp aborts on another's state),
  // which only a sequence holding a token can tell.
  const int32_t token = model.has_bos() ? model.bos_token() : 0;
  const SeqTokens one{0, 0, std::span(&token, 1)};
  bool one_cache = false;
  if (session.DecodeBatch(std::span(&one, 1)).ok()) {
    const Result<bool> kind = session.MemoryIsOneKvCache(0);
    one_cache = kind.ok() && *kind;
  }
  session.ClearSeq(0);
  if (!one_cache) return;
  const KvShape shape = model.info().KvShapeOf(tokens);
  for (int pass = 0; pass < 2; ++pass) {
    auto zeros = KvCache::Create(shape, DType::kF16);
    if (!zeros.ok()) return;
    // All but one cell, and a token in that one: the first step over that many cells touches
    // compute buffers no short prefill did (a millisecond of the first restored request's
    // first token).
    const uint32_t restored = std::min(tokens, session.options().n_ctx - 1);
    const auto view = zeros->View(0, restored);
    if (pass == 0 && view.ok() && session.RestoreSeqKv(0, *view).ok()) {
      const SeqTokens next{0, static_cast<int32_t>(restored), std::span(&token, 1)};
      (void)session.DecodeBatch(std::span(&next, 1));
      session.ClearSeq(0);
    }
  }
}

// The code a request runs is mapped from the program's and its libraries' files, and each page
// of it is faulted in the first time it runs: on the first request after a start, several
// milliseconds of the client's time to first token where a page fault traps to a hypervisor.
// Populating the executable mappings' page tables now (MADV_POPULATE_READ, Linux 5.14; an older
// kernel refuses it, and the pages are faulted in as before) pays that at start.
void PrefaultCode() {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return;
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long begin = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &begin, &end, perms) != 3 || perms[0] != 'r' || perms[2] != 'x') continue;
    constexpr int kPopulateRead = 22;  // MADV_POPULATE_READ, absent from older headers
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateRead);
  }
  std::fclose(maps);
}

}  // namespace

Result<std::unique_ptr<CompletionServer>> CompletionServer::Create(const ServerOptions& o) {
  if (o.parallel < 1 || o.parallel > 64) return InvalidArgument("parallel must be in 1..64");
  if (o.n_ctx < 2) return InvalidArgument("the context must be at least 2 tokens");
  if (o.max_body_bytes == 0 || o.max_body_bytes > (uint64_t{1} << 40))
    return InvalidArgument("the body limit must be in 1..2^40 bytes");
  if (!(o.request_timeout_s > 0 && o.request_timeout_s <= 86400))
    return InvalidArgument("the request timeout must be in (0, 86400] s");
  if (o.max_connections < 1 || o.max_connections > 65536) return InvalidArgument("max connections must be in 1..65536");
  if (!(o.store_retry_max_s > 0 && o.store_retry_max_s <= 3600))
    return InvalidArgument("the store's retry wait must be in (0, 3600] s");
  // The reuse options (codec, chunk size, link rate, fetch threads, quality limits) are checked
  // by the reuse set-up, before the model loads.
  ReuseSetupOptions setup_options = ReuseSetupOptionsOf(o);
  setup_options.min_fetch_threads = 1;  // the fetch threads are the server's own, never "one per core"
  setup_options.decide_floor = o.reuse;
  // A store that is down (Redis stopped, a wrong password) is no reason not to serve: requests
  // recompute while it is retried in the background. A malformed URL is still an error.
  setup_options.store = StoreOpening::kReconnecting;
  setup_options.reconnect.max_retry =
      std::max(setup_options.reconnect.first_retry,
               std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(o.store_retry_max_s)));
  ASSIGN_OR_RETURN(ReuseSetup setup, SetUpReuse(setup_options));
  auto impl = std::make_unique<Impl>();
  impl->o = o;
  impl->request_guard = RequestGuard(o);
  impl->model = std::move(setup.model);
  impl->calibrations = std::move(setup.calibrations);
  impl->store = std::move(setup.reconnecting_store);
  impl->stored_rungs = RungsReadersFetch(setup.plan.rungs, *impl->store, o.link_gbps, o.store_every_rung);
  if (o.reuse && impl->stored_rungs.size() < setup.plan.rungs.size()) {
    KVC_LOG_INFO(
        "storing new chunks as raw fp16 only: a local store with no link cap is read at page-cache speed, "
        "where raw is what every fetch takes (--link-gbps or --store-every-rung store the codec's rungs too)");
  }
  const QualityFloor& floor = setup.plan.floor;
  // Without a profile (or kvtc's calibration) the floor is lossless, which serves and stores,
  // and its note says how to calibrate: a warning, once, not a reason to refuse to start.
  if (floor.from_profile()) {
    KVC_LOG_INFO("quality floor: %s", PrintableOneLine(floor.note).c_str());
  } else if (o.reuse) {
    KVC_LOG_WARN("quality floor: %s", PrintableOneLine(floor.note).c_str());
  }
  SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_seq = static_cast<uint32_t>(o.parallel);
  so.n_threads = ServerLlamaThreads(o);
  so.require_kv = true;
  so.flash_attn = o.flash_attn;
  ASSIGN_OR_RETURN(impl->session, LlamaSession::Create(*impl->model, so));
  // The file name is what users type and tell apart; GGUF general.name is often the
  // converter's default (the test models say "llama").
  impl->model_name = ToValidUtf8(o.alias.empty() ? std::filesystem::path(o.model_path).stem().string() : o.alias);
  if (auto tmpl = impl->model->ChatTemplate(o.chat_template); tmpl.ok()) {
    impl->chat_template = *tmpl;
  } else if (!o.chat_template.empty()) {
    return tmpl.status();
  } else {
    KVC_LOG_WARN("%s; chat prompts are \"role: content\" lines instead", tmpl.status().message().c_str());
  }
  if (!impl->model->has_tokenizer()) {
    KVC_LOG_WARN("model %s has no tokenizer: only prompts of token ids are served, and completions have no text",
                 PrintableOneLine(impl->model_name).c_str());
  }
  KVC_LOG_INFO("chat prompts: %s", impl->chat_template.empty()
                                       ? "\"role: content\" lines (the model has no chat template)"
                                   : o.chat_template.empty() ? "the model's chat template"
                                                             : "the --chat-template given");
  impl->created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    // What decides an answer besides the request: this build, the model and its chat prompts.
    Xxh3Hasher h;
    const std::string version = KVCODEC_VERSION;
    h.Update(version.data(), version.size());
    h.Update(impl->model->fingerprint().data(), impl->model->fingerprint().size());
    h.Update(impl->chat_template.data(), impl->chat_template.size());
    impl->system_fingerprint = "fp_" + HexString(h.Digest()).substr(0, 10);
  }
  SchedulerOptions so2;
  so2.parallel = static_cast<uint32_t>(o.parallel);
  so2.fetch_threads = static_cast<uint32_t>(o.fetch_threads);
  so2.fifo = o.scheduler == ServerOptions::Scheduler::kFifo;
  so2.reuse = o.reuse;
  so2.hot_tier = o.hot_tier;
  so2.memory_bytes = o.cache_ram_mib > (uint64_t{1} << 40) ? uint64_t{1} << 60 : o.cache_ram_mib << 20;
  so2.chunk_tokens = o.chunk_tokens;
  so2.link_gbps = o.link_gbps;
  so2.rungs = impl->stored_rungs;
  so2.floor = floor;
  if (o.plan_recompute && o.chunk_prefill_s > 0) {
    so2.prefill = PrefillCost{o.chunk_prefill_s / o.chunk_tokens, 0};
    so2.learn_prefill = false;
  } else if (o.plan_recompute) {
    // Any token prices a prefill; 0 is in every vocabulary, and not every model has a BOS.
    const std::vector<int32_t> probe(64, impl->model->has_bos() ? impl->model->bos_token() : 0);
    ASSIGN_OR_RETURN(so2.prefill, MeasurePrefillCost(*impl->session, impl->model->info(), probe));
    KVC_LOG_INFO("prefill priced at %.1f ms a %u-token chunk from position 0, %.1f ms from 2048 (refitted as it runs)",
                 so2.prefill.Seconds(0, o.chunk_tokens) * 1e3, o.chunk_tokens,
                 so2.prefill.Seconds(2048, o.chunk_tokens) * 1e3);
  }
  if (o.reuse) WarmUpRestores(*impl->model, *impl->session);
  PrefaultCode();
  const ReuseContext reuse{impl->store.get(), FindCodec(o.codec), impl->calibrations.get(),
                           &impl->model->fingerprint()};
  impl->scheduler = std::make_unique<BatchScheduler>(*impl->model, *impl->session, reuse, so2, impl->metrics);
  HttpServerOptions http;
  http.request_timeout_s = o.request_timeout_s;
  http.max_connections = static_cast<size_t>(o.max_connections);
  http.reserved_paths = {"/health", "/metrics"};
  http.refusal_body = [s = impl.get()](const HttpRefusal& r) {
    if (const std::string endpoint = Endpoint(r.path); !endpoint.empty()) {
      s->metrics.CountRequest(endpoint, std::to_string(r.status));
    }
    return ErrorJson({r.message, ErrorType(r.status)});
  };
  impl->http = std::make_unique<HttpServer>(std::move(http));
  return std::unique_ptr<CompletionServer>(new CompletionServer(std::move(impl)));
}

Status CompletionServer::Start() {
  Impl& s = *impl_;
  httplib::Server& http = *s.http;
  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.HealthText(), "application/json");
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.MetricsText(), "text/plain; version=0.0.4");
  });
  // The one model served, as OpenAI lists models (model pickers ask for this first); /models is
  // llama-server's name for it.
  for (const char* path : {"/v1/models", "/models"}) {
    http.Get(path, [&s](const httplib::Request&, httplib::Response& res) {
      res.set_content(DumpJson(ModelList(s.model_name, s.created)), "application/json");
      s.metrics.CountRequest("models", "200");
    });
  }
  http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != s.model_name) {
      s.Reply(res, "models", 404,
              "the model '" + PrintableOneLine(id) + "' does not exist: this server serves '" + s.model_name + "'",
              {"model", "model_not_found"});
      return;
    }
    res.set_content(DumpJson(ModelObject(s.model_name, s.created)), "application/json");
    s.metrics.CountRequest("models", "200");
  });
  http.Post("/tokenize", [&s](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) { s.HandleTokenize(req, res, reader); });
  http.Post("/detokenize", [&s](const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) { s.HandleDetokenize(req, res, reader); });
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!s.request_guard.Unauthorized(req, res)) return httplib::Server::HandlerResponse::Unhandled;
    if (const std::string endpoint = Endpoint(req.path); !endpoint.empty()) s.metrics.CountRequest(endpoint, "401");
    return httplib::Server::HandlerResponse::Handled;
  });
  // OpenAI's endpoints, llama-server's unprefixed chat path, and llama-server's native
  // completion (/completion, and /completions as llama-server routes it).
  const std::pair<const char*, RequestDialect> completions[] = {{"/v1/completions", RequestDialect::kCompletions},
                                                                {"/v1/chat/completions", RequestDialect::kChat},
                                                                {"/chat/completions", RequestDialect::kChat},
                                                                {"/completion", RequestDialect::kLlamaCompletion},
                                                                {"/completions", RequestDialect::kLlamaCompletion}};
  for (const auto& route : completions) {
    const RequestDialect dialect = route.second;  // (clang 14 cannot capture a structured binding)
    http.Post(route.first,
              [&s, dialect](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
                s.HandleCompletion(req, res, reader, dialect);
              });
  }
  http.Get("/props", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(DumpJson(s.Props()), "application/json");
    s.metrics.CountRequest("props", "200");
  });
  http.Get("/slots", [&s](const httplib::Request&, httplib::Response& res) { s.HandleSlots(res); });
  http.Post(R"(/slots/([^/]*))", [&s](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) { s.HandleSlotAction(req, res, reader); });
  http.Post("/apply-template", [&s](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader& reader) { s.HandleApplyTemplate(req, res, reader); });
  // Embeddings need a model run for them (llama-server's --embeddings); this server generates.
  for (const char* path : {"/v1/embeddings", "/embeddings", "/embedding"}) {
    http.Post(path, [&s](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      std::string body;
      if (!s.ReadBody(req, res, reader, "embeddings", &body)) return;
      res.status = 501;
      res.set_content(ErrorJson({"this server generates text and does not serve embeddings", "not_supported_error", "",
                                 "not_supported"}),
                      "application/json");
      s.metrics.CountRequest("embeddings", "501");
    });
  }
  http.set_payload_max_length(s.o.max_body_bytes);  // bodies httplib reads itself (other paths)
  // A client that asks before sending its body (curl, for large ones) is told 413 instead of
  // "100 Continue", and sends nothing.
  http.set_expect_100_continue_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!s.request_guard.ContentLengthOverLimit(req)) return 100;
    res.status = 413;
    return 413;
  });
  // An exception out of a handler is that request's 500, never the process's end.
  http.set_exception_handler([&s](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
    const std::string what = ExceptionText(e);
    KVC_LOG_ERROR("%s %s failed: %s", req.method.c_str(), PrintableOneLine(req.path).c_str(), what.c_str());
    res.status = 500;
    res.set_content(ErrorJson({"internal error: " + what, "server_error"}), "application/json");
    if (const std::string endpoint = Endpoint(req.path); !endpoint.empty()) s.metrics.CountRequest(endpoint, "500");
  });
  // Errors httplib answers itself (no route, a malformed or oversized or late request) get our
  // JSON error too; our handlers' own errors already have their body (and are counted).
  http.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    HttpConnection* c = CurrentHttpConnection();
    if (c != nullptr && c->deadline_passed) res.status = 408;
    std::string message;
    switch (res.status) {
      case 404:
        message = "no such endpoint: " + PrintableOneLine(req.path);
        break;
      case 408:
        message = s.request_guard.TimeoutMessage();
        break;
      case 413:
        message = s.request_guard.BodyTooLargeMessage();
        break;
      case 414:
        message = "the request line is too long";
        break;
      case 431:
        message = "the request's headers are too large";
        break;
      default:
        message = FormatMessage("HTTP %d", res.status);
        break;
    }
    // The request's bytes may not all have been read: the connection cannot carry another.
    if (c != nullptr &&
        (res.status == 400 || res.status == 408 || res.status == 413 || res.status == 414 || res.status == 431)) {
      c->close = true;
    }
    res.set_content(ErrorJson({message, ErrorType(res.status)}), "application/json");
    if (const std::string endpoint = Endpoint(req.path); !endpoint.empty()) {
      s.metrics.CountRequest(endpoint, std::to_string(res.status));
    }
  });
  // SO_REUSEADDR (a restart binds despite connections in TIME_WAIT) but not httplib's default
  // SO_REUSEPORT, with which a second server on a busy port started and shared it.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (s.o.port == 0) {
    s.bound_port = http.bind_to_any_port(s.o.host);
  } else {
    s.bound_port = http.bind_to_port(s.o.host, s.o.port) ? s.o.port : -1;
  }
  if (s.bound_port <= 0) {
    return IoError(
        FormatMessage("cannot listen on %s:%d: %s", s.o.host.c_str(), s.o.port, BindError(s.o.host, s.o.port).c_str()));
  }
  s.http->RaiseBacklog();
  s.listener = std::thread([&http] {
    try {
      http.listen_after_bind();
    } catch (...) {
      KVC_LOG_ERROR("the server stopped listening: %s", ExceptionText(std::current_exception()).c_str());
    }
  });
  // Listening starts on the new thread; callers may connect as soon as Start returns.
  for (int i = 0; i < 5000 && !http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The first request a process answers pays first-time costs (code and stack pages faulted in
  // on the connection path: ~5 ms here, where a page fault traps to a hypervisor), which would
  // land on the first client's time to first token. A /health of our own pays them now; it is
  // not counted anywhere, and a failure only leaves them for the first client.
  const std::string self = s.o.host == "0.0.0.0" ? "127.0.0.1" : s.o.host == "::" ? "::1" : s.o.host;
  httplib::Client warm(self, s.bound_port);
  warm.set_connection_timeout(1, 0);
  warm.set_read_timeout(2, 0);
  (void)warm.Get("/health");
  return Status::Ok();
}

int CompletionServer::port() const { return impl_->bound_port; }

void CompletionServer::Stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.stop_mu);
    if (s.stopped) return;
    s.stopped = true;
  }
  s.http->stop();
  if (s.listener.joinable()) s.listener.join();
  // The listener returns once every connection's handler has, so every admitted request has
  // been answered (or its client is gone); then the stores drain.
  s.scheduler->Stop();
  {
    std::lock_guard lock(s.stop_mu);
    s.stop_cv.notify_all();
  }
}

void CompletionServer::Wait() {
  std::unique_lock lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace kvc
