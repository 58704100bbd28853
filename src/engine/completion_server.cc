#include "engine/completion_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/utf8.h"
#include "engine/batch_scheduler.h"
#include "engine/completion_request.h"
#include "engine/http_server.h"
#include "engine/llama_engine.h"
#include "engine/model_files.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

// Every text we send is valid UTF-8 already (ServeRequest's pieces, Status::ToString); dumping
// with replacement is the second guard, so a byte that slipped through becomes U+FFFD instead of
// an exception.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string ErrorJson(const std::string& message, const std::string& type) {
  return Dump(Json{{"error", {{"message", message}, {"type", type}}}});
}

const char* ErrorType(int status) { return status >= 500 ? "server_error" : "invalid_request_error"; }

// The /metrics endpoint label of a path ("" for paths that are not completion endpoints).
std::string Endpoint(const std::string& path) {
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/chat/completions") return "chat";
  return "";
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
  std::unique_ptr<LlamaModel> model;
  CalibrationRegistry calibrations;
  std::unique_ptr<Store> store;
  std::unique_ptr<LlamaSession> session;
  std::string model_name;
  int64_t created = 0;  // when the model was loaded (Unix seconds), /v1/models' "created"
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
    if (auto stats = store->Stats(); stats.ok()) {
      WriteMetricFamily(out, "kvcodec_store_bytes", "gauge", "Bytes held by the KV store.");
      out += FormatMessage("kvcodec_store_bytes %llu\n", static_cast<unsigned long long>(stats->bytes));
      WriteMetricFamily(out, "kvcodec_store_objects", "gauge", "Objects held by the KV store.");
      out += FormatMessage("kvcodec_store_objects %llu\n", static_cast<unsigned long long>(stats->objects));
    }
    return out;
  }

  // The checked request and its prompt as tokens; the error is a 400's message. A prompt that
  // cannot fit is rejected by its length before the tokenizer spends time on it.
  Result<std::pair<CompletionRequest, std::vector<int32_t>>> ReadRequest(const std::string& body, bool chat) {
    ASSIGN_OR_RETURN(CompletionRequest request, ParseCompletionRequest(body, chat, o.default_max_tokens, o.n_ctx));
    RETURN_IF_ERROR(CheckPromptCanFit(request.prompt.size(), request.max_tokens, o.n_ctx, model->max_token_bytes()));
    ASSIGN_OR_RETURN(std::vector<int32_t> tokens, model->Tokenize(request.prompt, true));
    if (tokens.size() < 2) return InvalidArgument("the prompt is empty");
    if (tokens.size() + request.max_tokens > o.n_ctx) {
      return InvalidArgument(FormatMessage("prompt (%zu tokens) plus max_tokens (%u) exceed the context of %u tokens",
                                           tokens.size(), request.max_tokens, o.n_ctx));
    }
    return std::pair{std::move(request), std::move(tokens)};
  }

  Json Usage(const Generation& g) const {
    return {{"prompt_tokens", g.prompt_tokens},
            {"completion_tokens", g.completion_tokens},
            {"total_tokens", g.prompt_tokens + g.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens}}}};
  }

  void Reply(httplib::Response& res, const std::string& endpoint, int status, const std::string& message) {
    res.status = status;
    res.set_content(ErrorJson(message, ErrorType(status)), "application/json");
    metrics.CountRequest(endpoint, std::to_string(status));
  }

  // The body, read here rather than by httplib, which bounds only a body with a Content-Length:
  // a chunked one is cut off at the limit too. False: the answer (413, 408 or 400) is set, and
  // the connection closes after it (the rest of the body is never read).
  bool ReadBody(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                const std::string& endpoint, std::string* body) {
    HttpConnection* c = CurrentHttpConnection();
    bool too_large = ContentLengthOverLimit(req);
    bool read = false;
    if (too_large) {
      // A client sends its whole body before it reads the answer, so one that is not read gets a
      // reset connection instead of the 413. A body up to 16 times the limit is read (httplib
      // drops it, holding none of it), a larger one is not.
      const uint64_t length = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
      if (c != nullptr && length / 16 <= o.max_body_bytes) {
        c->budget = c->read + length;
        (void)reader([](const char*, size_t) { return true; });
      }
    } else {
      // The body's bytes, with room for a chunked body's framing (a client that sends one in
      // tiny chunks is refused).
      if (c != nullptr) c->budget = c->read + 2 * uint64_t{o.max_body_bytes} + 4096;
      read = reader([&](const char* data, size_t n) {
        if (n > o.max_body_bytes - body->size()) {
          too_large = true;
          return false;
        }
        body->append(data, n);
        return true;
      });
    }
    if (read) return true;
    if (c != nullptr) c->close = true;
    if (too_large || res.status == 413) {
      Reply(res, endpoint, 413, FormatMessage("the request body is larger than the server's limit of %zu bytes", o.max_body_bytes));
    } else if (c != nullptr && c->deadline_passed) {
      Reply(res, endpoint, 408, FormatMessage("the request did not arrive within %g s", o.request_timeout_s));
    } else {
      Reply(res, endpoint, 400, "the request body could not be read");
    }
    return false;
  }

  // A Content-Length over the body limit. (One that is not a number is httplib's to refuse.)
  bool ContentLengthOverLimit(const httplib::Request& req) const {
    const std::string length = req.get_header_value("Content-Length");
    const bool digits = !length.empty() && std::all_of(length.begin(), length.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    return digits && (length.size() > 19 || std::strtoull(length.c_str(), nullptr, 10) > o.max_body_bytes);
  }

  void HandleCompletion(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                        bool chat) {
    const std::string endpoint = chat ? "chat" : "completions";
    std::string body;
    if (!ReadBody(req, res, reader, endpoint, &body)) return;
    auto read = ReadRequest(body, chat);
    body = std::string();
    if (!read.ok()) {
      Reply(res, endpoint, 400, read.status().message());
      return;
    }
    const bool stream = read->first.stream;
    static std::atomic<uint64_t> next_id{1};
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    const std::string object = chat ? "chat.completion" : "text_completion";
    auto request = std::make_shared<ServeRequest>(std::move(read->second), read->first.max_tokens);
    CancelOnExit guard{request};
    scheduler->Submit(request);

    if (!stream) {
      // Waits for the whole text, looking at the client meanwhile: one that has gone cancels
      // its request, which frees its sequence at the engine's next step.
      std::string text, piece;
      auto checked = SteadyClock::now();
      for (;;) {
        const ServeRequest::Next next = request->NextPiece(&piece, kClientCheck);
        if (next == ServeRequest::Next::kEnd) break;
        if (next == ServeRequest::Next::kPiece) text += piece;
        if (SteadyClock::now() - checked < kClientCheck) continue;
        checked = SteadyClock::now();
        if (!ClientConnected()) {
          request->Cancel();
          if (HttpConnection* c = CurrentHttpConnection(); c != nullptr) c->close = true;
          Reply(res, endpoint, 499, "the client closed the connection");
          return;
        }
      }
      const Status& s = request->status();
      const Generation& g = request->generation();
      if (!s.ok()) {
        Reply(res, endpoint, 500, s.ToString());
        return;
      }
      Json choice = {{"index", 0}, {"finish_reason", g.finish_reason}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      } else {
        choice["text"] = text;
        choice["logprobs"] = nullptr;
      }
      Json out = {{"id", id}, {"object", object}, {"created", created}, {"model", model_name},
                  {"choices", Json::array({choice})}, {"usage", Usage(g)}};
      res.set_content(Dump(out) + "\n", "application/json");  // a newline for terminals (curl)
      metrics.CountRequest(endpoint, "200");  // counted once the answer exists
      return;
    }

    // Server-sent events: one chunk per piece of text as the engine produces it, a last chunk
    // with the finish reason and usage, then [DONE]. A client that goes away cancels the
    // request, which frees its sequence at the engine's next step. This runs after the handler
    // has returned, outside httplib's exception guard: nothing may leave it.
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, request, id, created, chat, chunk_object, endpoint](size_t, httplib::DataSink& sink) {
          bool counted = false;
          auto count = [&](const char* status) {
            if (!counted) metrics.CountRequest(endpoint, status);
            counted = true;
          };
          try {
            return SendEvents(*request, id, created, chat, chunk_object, sink, count);
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
  bool SendEvents(ServeRequest& request, const std::string& id, int64_t created, bool chat, const std::string& chunk_object,
              httplib::DataSink& sink, Count& count) {
    auto event = [&](const Json& j) {
      const std::string line = "data: " + Dump(j) + "\n\n";
      return sink.is_writable() && sink.write(line.data(), line.size());
    };
    // The first chat delta names the role, as OpenAI's do (the SDK's stream helpers need it);
    // it rides on the first piece, so a client's first event is still its first token.
    bool role_sent = false;
    auto delta = [&](const std::string& piece, const Json& finish) {
      Json choice = {{"index", 0}, {"finish_reason", finish}};
      if (chat) {
        choice["delta"] = piece.empty() ? Json::object() : Json{{"content", piece}};
        if (!role_sent) {
          choice["delta"]["role"] = "assistant";
          if (!choice["delta"].contains("content")) choice["delta"]["content"] = "";
          role_sent = true;
        }
      } else {
        choice["text"] = piece;
      }
      return Json{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", model_name},
                  {"choices", Json::array({choice})}};
    };
    auto gone = [&] {
      request.Cancel();
      count("499");
      return false;
    };
    std::string piece;
    auto checked = SteadyClock::now();
    for (;;) {
      const ServeRequest::Next next = request.NextPiece(&piece, kClientCheck);
      if (next == ServeRequest::Next::kEnd) break;
      if (next == ServeRequest::Next::kPiece) {
        if (!event(delta(piece, nullptr))) return gone();
        checked = SteadyClock::now();
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
      event(Json::parse(ErrorJson(s.ToString(), "server_error")));
    } else {
      Json last = delta("", g.finish_reason);
      last["usage"] = Usage(g);
      const bool sent = event(last);
      const std::string done = "data: [DONE]\n\n";
      if (sent && sink.is_writable()) sink.write(done.data(), done.size());
      count("200");
    }
    sink.done();
    return true;
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

Result<std::unique_ptr<CompletionServer>> CompletionServer::Create(const ServerOptions& o) {
  if (o.parallel < 1 || o.parallel > 64) return InvalidArgument("parallel must be in 1..64");
  if (o.fetch_threads < 1 || o.fetch_threads > 64) return InvalidArgument("fetch threads must be in 1..64");
  if (o.n_ctx < 2 || o.chunk_tokens == 0) return InvalidArgument("the context and chunk size must be positive");
  if (o.max_body_bytes == 0 || o.max_body_bytes > (uint64_t{1} << 40)) return InvalidArgument("the body limit must be in 1..2^40 bytes");
  if (!(o.request_timeout_s > 0 && o.request_timeout_s <= 86400)) return InvalidArgument("the request timeout must be in (0, 86400] s");
  if (o.max_connections < 1 || o.max_connections > 65536) return InvalidArgument("max connections must be in 1..65536");
  auto impl = std::make_unique<Impl>();
  impl->o = o;
  const Codec* codec = FindCodec(o.codec);
  if (codec == nullptr) return InvalidArgument("unknown codec '" + o.codec + "'");
  QualityFloor floor;
  ASSIGN_OR_RETURN(impl->model, LlamaModel::Load(o.model_path));
  RETURN_IF_ERROR(LoadModelCalibration(impl->calibrations, o.model_path, o.calibration));
  if (o.reuse && codec->info().needs_calibration &&
      impl->calibrations.FindForModel(impl->model->fingerprint()) == nullptr) {
    return InvalidArgument("codec '" + o.codec + "' needs a calibration: run `kvcodec calibrate` or pass --calibration");
  }
  if (o.reuse) {
    ASSIGN_OR_RETURN(floor, LoadQualityFloor(o.model_path, o.profile, impl->model->fingerprint(), impl->calibrations,
                                             o.quality));
    KVC_LOG_INFO("quality floor: %s", PrintableOneLine(floor.note).c_str());
    ASSIGN_OR_RETURN(StorePlan plan, PlanStoredRungs(floor, o.codec));
    if (!plan.note.empty()) KVC_LOG_WARN("%s", plan.note.c_str());
    impl->stored_rungs = plan.rungs;
  }
  ASSIGN_OR_RETURN(impl->store, OpenStore(o.store_url.empty() ? DefaultStoreUrl() : o.store_url, StoreOptions{.secret = o.store_secret}));
  SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_seq = static_cast<uint32_t>(o.parallel);
  so.n_threads = ServerLlamaThreads(o);
  ASSIGN_OR_RETURN(impl->session, LlamaSession::Create(*impl->model, so));
  // The file name is what users type and tell apart; GGUF general.name is often the
  // converter's default (the test models say "llama").
  impl->model_name = ToValidUtf8(o.alias.empty() ? std::filesystem::path(o.model_path).stem().string() : o.alias);
  impl->created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  SchedulerOptions so2;
  so2.parallel = static_cast<uint32_t>(o.parallel);
  so2.fetch_threads = static_cast<uint32_t>(o.fetch_threads);
  so2.fifo = o.scheduler == ServerOptions::Scheduler::kFifo;
  so2.reuse = o.reuse;
  so2.chunk_tokens = o.chunk_tokens;
  so2.link_gbps = o.link_gbps;
  so2.rungs = impl->stored_rungs;
  so2.floor = floor;
  if (o.plan_recompute) {
    const std::vector<int32_t> probe(64, impl->model->bos_token());
    ASSIGN_OR_RETURN(so2.recompute_s, MeasureChunkPrefillSeconds(*impl->session, probe, o.chunk_tokens));
  }
  const ReuseContext reuse{impl->store.get(), codec, &impl->calibrations, &impl->model->fingerprint()};
  impl->scheduler = std::make_unique<BatchScheduler>(*impl->model, *impl->session, reuse, so2, impl->metrics);
  impl->http = std::make_unique<HttpServer>(o.request_timeout_s);
  return std::unique_ptr<CompletionServer>(new CompletionServer(std::move(impl)));
}

Status CompletionServer::Start() {
  Impl& s = *impl_;
  httplib::Server& http = *s.http;
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.MetricsText(), "text/plain; version=0.0.4");
  });
  // The one model served, as OpenAI lists models (model pickers ask for this first).
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    const Json model = {{"id", s.model_name}, {"object", "model"}, {"created", s.created}, {"owned_by", "kvcodec"}};
    res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({model})}}), "application/json");
    s.metrics.CountRequest("models", "200");
  });
  http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    s.HandleCompletion(req, res, reader, false);
  });
  http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    s.HandleCompletion(req, res, reader, true);
  });
  // Connection threads as needed, up to the limit (see ConnectionThreads): with a fixed pool,
  // clients would queue inside the HTTP library behind slow ones, unseen by the scheduler.
  const size_t connection_threads = static_cast<size_t>(s.o.max_connections);
  http.new_task_queue = [connection_threads] { return NewConnectionThreads(connection_threads); };
  http.set_payload_max_length(s.o.max_body_bytes);  // bodies httplib reads itself (other paths)
  // A client that asks before sending its body (curl, for large ones) is told 413 instead of
  // "100 Continue", and sends nothing.
  http.set_expect_100_continue_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!s.ContentLengthOverLimit(req)) return 100;
    res.status = 413;
    return 413;
  });
  // An exception out of a handler is that request's 500, never the process's end.
  http.set_exception_handler([&s](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
    const std::string what = ExceptionText(e);
    KVC_LOG_ERROR("%s %s failed: %s", req.method.c_str(), PrintableOneLine(req.path).c_str(), what.c_str());
    res.status = 500;
    res.set_content(ErrorJson("internal error: " + what, "server_error"), "application/json");
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
      case 404: message = "no such endpoint: " + PrintableOneLine(req.path); break;
      case 408: message = FormatMessage("the request did not arrive within %g s", s.o.request_timeout_s); break;
      case 413: message = FormatMessage("the request body is larger than the server's limit of %zu bytes", s.o.max_body_bytes); break;
      default: message = FormatMessage("HTTP %d", res.status); break;
    }
    // The request's bytes may not all have been read: the connection cannot carry another.
    if (c != nullptr && (res.status == 400 || res.status == 408 || res.status == 413)) c->close = true;
    res.set_content(ErrorJson(message, ErrorType(res.status)), "application/json");
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
    return IoError(FormatMessage("cannot listen on %s:%d: %s", s.o.host.c_str(), s.o.port, BindError(s.o.host, s.o.port).c_str()));
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
