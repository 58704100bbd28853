#include "engine/completion_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/log.h"
#include "base/thread_pool.h"
#include "engine/llama_engine.h"
#include "engine/model_files.h"
#include "engine/prefix_cache.h"

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr double kLatencyBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

// A Prometheus histogram of seconds.
struct Histogram {
  std::vector<uint64_t> counts = std::vector<uint64_t>(std::size(kLatencyBuckets) + 1, 0);
  double sum = 0;
  uint64_t n = 0;
  void Add(double s) {
    size_t i = 0;
    while (i < std::size(kLatencyBuckets) && s > kLatencyBuckets[i]) ++i;
    ++counts[i];
    sum += s;
    ++n;
  }
  void Write(std::string& out, const std::string& name, const std::string& labels) const {
    uint64_t cumulative = 0;
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < std::size(kLatencyBuckets); ++i) {
      cumulative += counts[i];
      out += FormatMessage("%s_bucket{%sle=\"%g\"} %llu\n", name.c_str(), sep.c_str(), kLatencyBuckets[i],
                           static_cast<unsigned long long>(cumulative));
    }
    cumulative += counts.back();
    out += FormatMessage("%s_bucket{%sle=\"+Inf\"} %llu\n", name.c_str(), sep.c_str(),
                         static_cast<unsigned long long>(cumulative));
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    out += FormatMessage("%s_sum%s %.6f\n%s_count%s %llu\n", name.c_str(), braces.c_str(), sum, name.c_str(),
                         braces.c_str(), static_cast<unsigned long long>(n));
  }
};

struct Metrics {
  std::mutex mu;
  std::map<std::string, uint64_t> requests;  // "endpoint,status" -> count
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0, fetched_bytes = 0, stored_bytes = 0;
  uint64_t store_failures = 0, disconnects = 0;
  Histogram ttft, lookup, fetch, restore, prefill;
};

// What one generation did, for the response's usage block and the metrics.
struct Generation {
  uint32_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  std::string finish_reason = "length";
  uint64_t fetched_bytes = 0;
  double ttft_s = 0;
};

struct StoreJob {
  KvCache kv;
  std::vector<ChunkKey> keys;
  uint32_t first = 0;
};

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
  const Codec* codec = nullptr;
  std::vector<std::string> levels;
  double recompute_s = 0;
  std::string model_name;
  // The one emulated link every request's fetch shares, as concurrent fetches share a network.
  LinkShaper link;
  httplib::Server http;
  std::thread listener;
  int bound_port = 0;

  std::mutex engine_mu;  // one generation at a time on the one sequence
  std::atomic<int> waiting_for_kv{0};  // fetching and decoding their stored prefix
  std::atomic<int> waiting{0};         // ready, queued for the sequence
  std::atomic<int> running{0};
  Metrics metrics;

  std::mutex store_mu;
  std::condition_variable store_cv;
  std::deque<StoreJob> store_jobs;
  bool store_stopping = false;
  std::thread storer;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  void CountRequest(const std::string& endpoint, const std::string& status) {
    std::lock_guard lock(metrics.mu);
    ++metrics.requests[endpoint + "," + status];
  }

  // Restores the stored prefix, prefills the rest and generates up to max_tokens tokens, calling
  // emit for each piece of text; emit returns false when the client is gone.
  Status Generate(const std::vector<int32_t>& tokens, uint32_t max_tokens,
                  const std::function<bool(const std::string&)>& emit, Generation* g) {
    const auto t0 = Clock::now();
    g->prompt_tokens = static_cast<uint32_t>(tokens.size());
    const std::vector<ChunkKey> keys = ReusableChunkKeys(model->fingerprint(), tokens, o.chunk_tokens);
    // KV-fetch-aware scheduling: a request with a stored prefix fetches and decodes it here, in
    // the waiting-for-KV queue, without the sequence; only then does it queue for the sequence.
    // A request with nothing stored goes straight to the sequence and is never held up by
    // another request's transfer.
    std::optional<FetchedPrefix> fetched;
    {
      ++waiting_for_kv;
      const CodecContext context{&calibrations, &model->fingerprint(), nullptr};
      auto f = FetchStoredPrefix(*store, model->fingerprint(), keys, o.chunk_tokens, context, link,
                                 ReuseFetchOptions(o.link_gbps, o.plan_recompute ? recompute_s : 0));
      --waiting_for_kv;
      if (!f.ok()) {
        // The store failed as a whole: recompute, keep serving.
        KVC_LOG_WARN("KV reuse failed, recomputing: %s", f.status().ToString().c_str());
      } else {
        if (!f->stats.fallback.empty()) {
          KVC_LOG_WARN("KV reuse stopped early, recomputing the rest: %s", f->stats.fallback.c_str());
        }
        fetched = std::move(*f);
      }
    }
    ++waiting;
    std::unique_lock lock(engine_mu);
    --waiting;
    ++running;
    struct Done {
      std::atomic<int>& r;
      ~Done() { --r; }
    } done{running};
    session->Clear();
    uint32_t restored = 0;
    if (fetched && fetched->stats.chunks_fetched > 0) {
      const auto t_restore = Clock::now();
      if (Status s = session->RestoreKv(fetched->kv); s.ok()) {
        restored = fetched->stats.chunks_fetched;
        g->fetched_bytes = fetched->stats.bytes;
      } else {
        KVC_LOG_WARN("restoring the fetched prefix failed, recomputing: %s", s.ToString().c_str());
        session->Clear();
      }
      fetched->stats.restore_s = Since(t_restore);
    }
    if (fetched) {
      std::lock_guard m(metrics.mu);
      metrics.lookup.Add(fetched->stats.lookup_s);
      metrics.fetch.Add(fetched->stats.fetch_s);
      metrics.restore.Add(fetched->stats.restore_s);
    }
    g->cached_tokens = restored * o.chunk_tokens;
    const auto t_prefill = Clock::now();
    RETURN_IF_ERROR(session->Eval(std::span(tokens).subspan(g->cached_tokens), false));
    const double prefill_s = Since(t_prefill);
    int32_t next = GreedyToken(session->Logits(-1));
    g->ttft_s = Since(t0);
    bool client_gone = false;
    for (uint32_t i = 0; i < max_tokens; ++i) {
      if (model->IsEndOfGeneration(next)) {
        g->finish_reason = "stop";
        break;
      }
      ++g->completion_tokens;
      if (!emit(model->TokenText(next))) {
        client_gone = true;
        break;
      }
      if (i + 1 == max_tokens) break;
      RETURN_IF_ERROR(session->Eval(std::span(&next, 1), false));
      next = GreedyToken(session->Logits(-1));
    }
    {
      std::lock_guard m(metrics.mu);
      metrics.ttft.Add(g->ttft_s);
      metrics.prefill.Add(prefill_s);
      metrics.prompt_tokens += g->prompt_tokens;
      metrics.cached_tokens += g->cached_tokens;
      metrics.completion_tokens += g->completion_tokens;
      metrics.fetched_bytes += g->fetched_bytes;
      metrics.disconnects += client_gone ? 1 : 0;
    }
    // New (or unrestorable) chunks go to the background storer; the KV is copied out now,
    // while the sequence still holds this request.
    if (restored < keys.size()) {
      auto kv = session->ExtractKv();
      if (kv.ok()) {
        std::lock_guard s(store_mu);
        store_jobs.push_back({std::move(*kv), keys, restored});
        store_cv.notify_one();
      }
    }
    return Status::Ok();
  }

  void StorerLoop() {
    ThreadPool pool(2);
    const CodecContext context{&calibrations, &model->fingerprint(), &pool};
    for (;;) {
      StoreJob job;
      {
        std::unique_lock lock(store_mu);
        store_cv.wait(lock, [&] { return store_stopping || !store_jobs.empty(); });
        if (store_jobs.empty()) return;
        job = std::move(store_jobs.front());
      }
      auto stored = StoreChunks(*store, job.kv, job.keys, job.first, o.chunk_tokens, *codec, levels, model->fingerprint(),
                                context);
      {
        std::lock_guard m(metrics.mu);
        if (stored.ok()) {
          metrics.stored_bytes += stored->bytes;
        } else {
          ++metrics.store_failures;
        }
      }
      if (!stored.ok()) KVC_LOG_WARN("storing new chunks failed: %s", stored.status().ToString().c_str());
      std::lock_guard lock(store_mu);
      store_jobs.pop_front();
      store_cv.notify_all();
    }
  }

  std::string MetricsText() {
    std::string out;
    {
      std::lock_guard lock(metrics.mu);
      out += "# TYPE kvcodec_requests_total counter\n";
      for (const auto& [key, n] : metrics.requests) {
        const size_t comma = key.find(',');
        out += FormatMessage("kvcodec_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", key.substr(0, comma).c_str(),
                             key.substr(comma + 1).c_str(), static_cast<unsigned long long>(n));
      }
      auto counter = [&](const char* name, uint64_t v) {
        out += FormatMessage("# TYPE %s counter\n%s %llu\n", name, name, static_cast<unsigned long long>(v));
      };
      counter("kvcodec_prompt_tokens_total", metrics.prompt_tokens);
      counter("kvcodec_cached_prompt_tokens_total", metrics.cached_tokens);
      counter("kvcodec_completion_tokens_total", metrics.completion_tokens);
      counter("kvcodec_fetched_bytes_total", metrics.fetched_bytes);
      counter("kvcodec_stored_bytes_total", metrics.stored_bytes);
      counter("kvcodec_store_failures_total", metrics.store_failures);
      counter("kvcodec_client_disconnects_total", metrics.disconnects);
      out += "# TYPE kvcodec_ttft_seconds histogram\n";
      metrics.ttft.Write(out, "kvcodec_ttft_seconds", "");
      out += "# TYPE kvcodec_stage_seconds histogram\n";
      metrics.lookup.Write(out, "kvcodec_stage_seconds", "stage=\"lookup\"");
      metrics.fetch.Write(out, "kvcodec_stage_seconds", "stage=\"fetch\"");
      metrics.restore.Write(out, "kvcodec_stage_seconds", "stage=\"restore\"");
      metrics.prefill.Write(out, "kvcodec_stage_seconds", "stage=\"prefill\"");
    }
    size_t pending = 0;
    {
      std::lock_guard lock(store_mu);
      pending = store_jobs.size();
    }
    out += "# TYPE kvcodec_queue_length gauge\n";
    out += FormatMessage("kvcodec_queue_length{queue=\"waiting_for_kv\"} %d\n", waiting_for_kv.load());
    out += FormatMessage("kvcodec_queue_length{queue=\"waiting\"} %d\n", waiting.load());
    out += FormatMessage("kvcodec_queue_length{queue=\"running\"} %d\n", running.load());
    out += FormatMessage("kvcodec_queue_length{queue=\"store\"} %zu\n", pending);
    if (auto stats = store->Stats(); stats.ok()) {
      out += FormatMessage("# TYPE kvcodec_store_bytes gauge\nkvcodec_store_bytes %llu\n",
                           static_cast<unsigned long long>(stats->bytes));
      out += FormatMessage("# TYPE kvcodec_store_objects gauge\nkvcodec_store_objects %llu\n",
                           static_cast<unsigned long long>(stats->objects));
    }
    return out;
  }

  // Parses a request body into a prompt and a token budget; the error is a 400's message.
  Result<std::pair<std::vector<int32_t>, uint32_t>> ParseRequest(const Json& body, bool chat, bool* stream) {
    if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
    std::string prompt;
    if (chat) {
      if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
        return InvalidArgument("'messages' must be a non-empty array");
      }
      for (const auto& m : body["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string()) {
          return InvalidArgument("each message needs string 'role' and 'content'");
        }
        prompt += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
      }
      prompt += "assistant:";
    } else {
      if (!body.contains("prompt") || !body["prompt"].is_string()) return InvalidArgument("'prompt' must be a string");
      prompt = body["prompt"].get<std::string>();
    }
    uint32_t max_tokens = o.default_max_tokens;
    if (body.contains("max_tokens")) {
      if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1 ||
          body["max_tokens"].get<int64_t>() > o.n_ctx) {
        return InvalidArgument(FormatMessage("'max_tokens' must be an integer in 1..%u", o.n_ctx));
      }
      max_tokens = body["max_tokens"].get<uint32_t>();
    }
    *stream = false;
    if (body.contains("stream")) {
      if (!body["stream"].is_boolean()) return InvalidArgument("'stream' must be a boolean");
      *stream = body["stream"].get<bool>();
    }
    ASSIGN_OR_RETURN(std::vector<int32_t> tokens, model->Tokenize(prompt, true));
    if (tokens.size() < 2) return InvalidArgument("the prompt is empty");
    if (tokens.size() + max_tokens > o.n_ctx) {
      return InvalidArgument(FormatMessage("prompt (%zu tokens) plus max_tokens (%u) exceed the context of %u tokens",
                                           tokens.size(), max_tokens, o.n_ctx));
    }
    return std::pair{std::move(tokens), max_tokens};
  }

  Json Usage(const Generation& g) const {
    return {{"prompt_tokens", g.prompt_tokens},
            {"completion_tokens", g.completion_tokens},
            {"total_tokens", g.prompt_tokens + g.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens}}}};
  }

  void HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "chat" : "completions";
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      CountRequest(endpoint, "400");
      res.status = 400;
      res.set_content(ErrorJson("the body is not valid JSON", "invalid_request_error"), "application/json");
      return;
    }
    bool stream = false;
    auto parsed = ParseRequest(body, chat, &stream);
    if (!parsed.ok()) {
      CountRequest(endpoint, "400");
      res.status = 400;
      res.set_content(ErrorJson(parsed.status().message(), "invalid_request_error"), "application/json");
      return;
    }
    static std::atomic<uint64_t> next_id{1};
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    const std::string object = chat ? "chat.completion" : "text_completion";
    auto tokens = std::make_shared<std::vector<int32_t>>(std::move(parsed->first));
    const uint32_t max_tokens = parsed->second;

    if (!stream) {
      std::string text;
      Generation g;
      const Status s = Generate(*tokens, max_tokens, [&](const std::string& piece) {
        text += piece;
        return true;
      }, &g);
      if (!s.ok()) {
        CountRequest(endpoint, "500");
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
      CountRequest(endpoint, "200");
      res.set_content(out.dump(), "application/json");
      return;
    }

    // Server-sent events: one chunk per token, a last chunk with the finish reason and usage,
    // then [DONE]. Generation runs on this connection's thread as the client reads.
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, tokens, max_tokens, id, created, chat, chunk_object, endpoint](size_t, httplib::DataSink& sink) {
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
          Generation g;
          const Status s = Generate(*tokens, max_tokens, [&](const std::string& piece) {
            return event(delta(piece, nullptr));
          }, &g);
          if (!s.ok()) {
            CountRequest(endpoint, "500");
            event(Json::parse(ErrorJson(s.ToString(), "server_error")));
          } else {
            CountRequest(endpoint, "200");
            Json last = delta("", g.finish_reason);
            last["usage"] = Usage(g);
            event(last);
            const std::string done = "data: [DONE]\n\n";
            if (sink.is_writable()) sink.write(done.data(), done.size());
          }
          sink.done();
          return true;
        });
  }
};

CompletionServer::CompletionServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CompletionServer::~CompletionServer() { Stop(); }

Result<std::unique_ptr<CompletionServer>> CompletionServer::Create(const ServerOptions& o) {
  auto impl = std::make_unique<Impl>();
  impl->o = o;
  impl->codec = FindCodec(o.codec);
  if (impl->codec == nullptr) return InvalidArgument("unknown codec '" + o.codec + "'");
  impl->levels = StoredLevels(o.codec);
  ASSIGN_OR_RETURN(impl->model, LlamaModel::Load(o.model_path));
  RETURN_IF_ERROR(LoadModelCalibration(impl->calibrations, o.model_path, o.calibration));
  if (impl->codec->info().needs_calibration && impl->calibrations.FindForModel(impl->model->fingerprint()) == nullptr) {
    return InvalidArgument("codec '" + o.codec + "' needs a calibration: run `kvcodec calibrate` or pass --calibration");
  }
  ASSIGN_OR_RETURN(impl->store, OpenStore(o.store_url.empty() ? DefaultStoreUrl() : o.store_url));
  SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_threads = o.threads;
  ASSIGN_OR_RETURN(impl->session, LlamaSession::Create(*impl->model, so));
  impl->model_name = std::filesystem::path(o.model_path).stem().string();
  impl->link.SetRate(LinkShaper::GbpsToBytesPerSecond(o.link_gbps));
  const std::vector<int32_t> probe(64, impl->model->bos_token());
  ASSIGN_OR_RETURN(impl->recompute_s, MeasureChunkPrefillSeconds(*impl->session, probe, o.chunk_tokens));
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
  s.storer = std::thread([&s] { s.StorerLoop(); });
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
  // Let the request that holds the sequence finish, then drain the stores.
  { std::lock_guard engine(s.engine_mu); }
  {
    std::lock_guard lock(s.store_mu);
    s.store_stopping = true;
    s.store_cv.notify_all();
  }
  if (s.storer.joinable()) s.storer.join();
  s.stop_cv.notify_all();
}

void CompletionServer::Wait() {
  std::unique_lock lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace kvc
