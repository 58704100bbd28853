#include "engine/completion_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/batch_scheduler.h"
#include "engine/completion_request.h"
#include "engine/llama_engine.h"
#include "engine/model_files.h"

namespace kvc {
namespace {

using Json = nlohmann::json;

std::string ErrorJson(const std::string& message, const std::string& type) {
  return Json{{"error", {{"message", message}, {"type", type}}}}.dump();
}

}  // namespace

struct CompletionServer::Impl {
  ServerOptions o;
  std::unique_ptr<LlamaModel> model;
  CalibrationRegistry calibrations;
  std::unique_ptr<Store> store;
  std::unique_ptr<LlamaSession> session;
  std::string model_name;
  ServeMetrics metrics;
  std::unique_ptr<BatchScheduler> scheduler;
  httplib::Server http;
  std::thread listener;
  int bound_port = 0;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  std::string MetricsText() {
    std::string out = metrics.Text();
    const BatchScheduler::Gauges g = scheduler->gauges();
    out += "# TYPE kvcodec_queue_length gauge\n";
    out += FormatMessage("kvcodec_queue_length{queue=\"waiting_for_kv\"} %d\n", g.waiting_for_kv);
    out += FormatMessage("kvcodec_queue_length{queue=\"waiting\"} %d\n", g.waiting);
    out += FormatMessage("kvcodec_queue_length{queue=\"running\"} %d\n", g.running);
    out += FormatMessage("kvcodec_queue_length{queue=\"store\"} %d\n", g.store_pending);
    if (auto stats = store->Stats(); stats.ok()) {
      out += FormatMessage("# TYPE kvcodec_store_bytes gauge\nkvcodec_store_bytes %llu\n",
                           static_cast<unsigned long long>(stats->bytes));
      out += FormatMessage("# TYPE kvcodec_store_objects gauge\nkvcodec_store_objects %llu\n",
                           static_cast<unsigned long long>(stats->objects));
    }
    return out;
  }

  // The checked request and its prompt as tokens; the error is a 400's message.
  Result<std::pair<CompletionRequest, std::vector<int32_t>>> ReadRequest(const std::string& body, bool chat) {
    ASSIGN_OR_RETURN(CompletionRequest request, ParseCompletionRequest(body, chat, o.default_max_tokens, o.n_ctx));
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

  void HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "chat" : "completions";
    auto read = ReadRequest(req.body, chat);
    if (!read.ok()) {
      metrics.CountRequest(endpoint, "400");
      res.status = 400;
      res.set_content(ErrorJson(read.status().message(), "invalid_request_error"), "application/json");
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
    scheduler->Submit(request);

    if (!stream) {
      std::string text, piece;
      while (request->NextPiece(&piece)) text += piece;
      const Status& s = request->status();
      const Generation& g = request->generation();
      if (!s.ok()) {
        metrics.CountRequest(endpoint, "500");
        res.status = 500;
        res.set_content(ErrorJson(s.ToString(), "server_error"), "application/json");
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
      metrics.CountRequest(endpoint, "200");
      res.set_content(out.dump() + "\n", "application/json");  // a newline for terminals (curl)
      return;
    }

    // Server-sent events: one chunk per token as the engine produces it, a last chunk with the
    // finish reason and usage, then [DONE]. A client that goes away cancels the request, which
    // frees its sequence at the engine's next step.
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, request, id, created, chat, chunk_object, endpoint](size_t, httplib::DataSink& sink) {
          auto event = [&](const Json& j) {
            const std::string line = "data: " + j.dump() + "\n\n";
            return sink.is_writable() && sink.write(line.data(), line.size());
          };
          auto delta = [&](const std::string& piece, const Json& finish) {
            Json choice = {{"index", 0}, {"finish_reason", finish}};
            if (chat) {
              choice["delta"] = piece.empty() ? Json::object() : Json{{"content", piece}};
            } else {
              choice["text"] = piece;
            }
            return Json{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", model_name},
                        {"choices", Json::array({choice})}};
          };
          std::string piece;
          while (request->NextPiece(&piece)) {
            if (!event(delta(piece, nullptr))) {
              request->Cancel();
              metrics.CountRequest(endpoint, "499");
              return false;
            }
          }
          const Status& s = request->status();
          const Generation& g = request->generation();
          if (!s.ok()) {
            metrics.CountRequest(endpoint, "500");
            event(Json::parse(ErrorJson(s.ToString(), "server_error")));
          } else {
            metrics.CountRequest(endpoint, "200");
            Json last = delta("", g.finish_reason);
            last["usage"] = Usage(g);
            event(last);
            const std::string done = "data: [DONE]\n\n";
            if (sink.is_writable()) sink.write(done.data(), done.size());
          }
          sink.done();
          return true;
        },
        [request](bool success) {
          if (!success) request->Cancel();
        });
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
  auto impl = std::make_unique<Impl>();
  impl->o = o;
  const Codec* codec = FindCodec(o.codec);
  if (codec == nullptr) return InvalidArgument("unknown codec '" + o.codec + "'");
  ASSIGN_OR_RETURN(impl->model, LlamaModel::Load(o.model_path));
  RETURN_IF_ERROR(LoadModelCalibration(impl->calibrations, o.model_path, o.calibration));
  if (o.reuse && codec->info().needs_calibration &&
      impl->calibrations.FindForModel(impl->model->fingerprint()) == nullptr) {
    return InvalidArgument("codec '" + o.codec + "' needs a calibration: run `kvcodec calibrate` or pass --calibration");
  }
  ASSIGN_OR_RETURN(impl->store, OpenStore(o.store_url.empty() ? DefaultStoreUrl() : o.store_url));
  SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_seq = static_cast<uint32_t>(o.parallel);
  so.n_threads = ServerLlamaThreads(o);
  ASSIGN_OR_RETURN(impl->session, LlamaSession::Create(*impl->model, so));
  impl->model_name = std::filesystem::path(o.model_path).stem().string();
  SchedulerOptions so2;
  so2.parallel = static_cast<uint32_t>(o.parallel);
  so2.fetch_threads = static_cast<uint32_t>(o.fetch_threads);
  so2.fifo = o.scheduler == ServerOptions::Scheduler::kFifo;
  so2.reuse = o.reuse;
  so2.chunk_tokens = o.chunk_tokens;
  so2.link_gbps = o.link_gbps;
  so2.levels = StoredLevels(o.codec);
  if (o.plan_recompute) {
    const std::vector<int32_t> probe(64, impl->model->bos_token());
    ASSIGN_OR_RETURN(so2.recompute_s, MeasureChunkPrefillSeconds(*impl->session, probe, o.chunk_tokens));
  }
  const ReuseContext reuse{impl->store.get(), codec, &impl->calibrations, &impl->model->fingerprint()};
  impl->scheduler = std::make_unique<BatchScheduler>(*impl->model, *impl->session, reuse, so2, impl->metrics);
  return std::unique_ptr<CompletionServer>(new CompletionServer(std::move(impl)));
}

Status CompletionServer::Start() {
  Impl& s = *impl_;
  s.http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.MetricsText(), "text/plain; version=0.0.4");
  });
  s.http.Post("/v1/completions",
              [&s](const httplib::Request& req, httplib::Response& res) { s.HandleCompletion(req, res, false); });
  s.http.Post("/v1/chat/completions",
              [&s](const httplib::Request& req, httplib::Response& res) { s.HandleCompletion(req, res, true); });
  // A connection thread per client that may be waiting at once (streams, fetches in flight,
  // the queue for a sequence): with too few, clients would queue inside the HTTP library, where
  // the scheduler cannot see them and a request with nothing to fetch waits behind blocked ones.
  const size_t connection_threads = std::max<size_t>(64, 8 * static_cast<size_t>(s.o.parallel));
  s.http.new_task_queue = [connection_threads] { return new httplib::ThreadPool(connection_threads); };
  s.http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content(ErrorJson(FormatMessage("HTTP %d", res.status), "invalid_request_error"), "application/json");
    }
  });
  if (s.o.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.o.host);
  } else {
    s.bound_port = s.http.bind_to_port(s.o.host, s.o.port) ? s.o.port : -1;
  }
  if (s.bound_port <= 0) return IoError(FormatMessage("cannot listen on %s:%d", s.o.host.c_str(), s.o.port));
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  // Listening starts on the new thread; callers may connect as soon as Start returns.
  for (int i = 0; i < 5000 && !s.http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
  s.http.stop();
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
