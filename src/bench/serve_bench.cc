#include "bench/serve_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "base/progress.h"
#include "llama/llama_model.h"
#include "llama/model_files.h"
#include "serve/completion_client.h"
#include "serve/completion_server.h"

namespace kvc {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr double kStoreDrainTimeoutS = 300;

// Cuts the text's tokens into consecutive pieces that each start at a word (a token whose text
// begins with a space). SentencePiece never merges across the space that starts a word, so a
// prompt made of such pieces tokenizes back into them, and every prompt that starts with the
// same document starts with the same tokens: the same chunk keys.
class TextCutter {
 public:
  TextCutter(const LlamaModel& model, std::vector<int32_t> tokens) : model_(model), tokens_(std::move(tokens)) {}

  Result<std::string> Next(uint32_t n) {
    while (at_ < tokens_.size() && model_.TokenText(tokens_[at_]).rfind(' ', 0) != 0) ++at_;
    if (at_ + n > tokens_.size()) {
      return InvalidArgument(
          FormatMessage("the text has %zu tokens, too few for the prompts asked for", tokens_.size()));
    }
    std::string text;
    for (uint32_t i = 0; i < n; ++i) text += model_.TokenText(tokens_[at_ + i]);
    at_ += n;
    return text;
  }

 private:
  const LlamaModel& model_;
  std::vector<int32_t> tokens_;
  size_t at_ = 0;
};

struct Config {
  std::string name;
  bool external = false;
  bool reuse = true;
  ServerOptions::Scheduler scheduler = ServerOptions::Scheduler::kKvAware;
};

Json Distribution(std::vector<double> v) {
  Json j;
  j["p50"] = PercentileNearestRank(v, 50);
  j["p90"] = PercentileNearestRank(v, 90);
  j["p99"] = PercentileNearestRank(v, 99);
  j["mean"] = v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return j;
}

const char* ClassName(bool shared) { return shared ? "shared_prefix" : "no_prefix"; }

// Per class: counts, TTFT and end-to-end latency over the requests that succeeded, hit rate.
Json ClassStats(const std::vector<ServeTraceRequest>& trace, const std::vector<CompletionOutcome>& outcomes,
                bool shared) {
  std::vector<double> ttft, latency;
  uint64_t n = 0, errors = 0, prompt = 0, cached = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].shared != shared) continue;
    ++n;
    const CompletionOutcome& o = outcomes[i];
    if (!o.ok) {
      ++errors;
      continue;
    }
    if (o.got_token) ttft.push_back(o.first_token_s - o.send_s);
    latency.push_back(o.finish_s - o.send_s);
    prompt += o.prompt_tokens;
    cached += o.cached_tokens;
  }
  Json j;
  j["n"] = n;
  j["errors"] = errors;
  j["ttft_s"] = Distribution(ttft);
  j["latency_s"] = Distribution(latency);
  j["prompt_tokens"] = prompt;
  j["cached_tokens"] = cached;
  j["hit_rate"] = prompt ? static_cast<double>(cached) / static_cast<double>(prompt) : 0.0;
  return j;
}

}  // namespace

double PercentileNearestRank(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size()));
  return values[static_cast<size_t>(std::max(rank, 1.0)) - 1];
}

std::vector<ServeTraceRequest> MakeServeTrace(const ServeBenchOptions& o) {
  std::mt19937_64 rng(o.seed);
  const auto n_shared =
      static_cast<uint32_t>(std::lround(std::clamp(o.shared_fraction, 0.0, 1.0) * static_cast<double>(o.requests)));
  std::vector<bool> shared(o.requests, false);
  std::fill_n(shared.begin(), n_shared, true);
  std::shuffle(shared.begin(), shared.end(), rng);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  std::uniform_int_distribution<uint32_t> prefix(0, std::max(1u, o.prefixes) - 1);
  std::uniform_int_distribution<uint32_t> unique(o.unique_tokens * 4 / 5, std::max(1u, o.unique_tokens * 6 / 5));
  std::vector<ServeTraceRequest> trace(o.requests);
  double t = 0;
  for (uint32_t i = 0; i < o.requests; ++i) {
    // The first request arrives at 0: the replay starts with work, not with an idle gap.
    if (i > 0) t += gap(rng);
    trace[i].arrival_s = t;
    trace[i].shared = shared[i];
    // Both draws every time, so a request's values do not depend on the classes before it.
    const uint32_t p = prefix(rng), u = unique(rng);
    if (shared[i]) {
      trace[i].prefix = p;
    } else {
      trace[i].unique_tokens = u;
    }
  }
  return trace;
}

Result<std::string> RunServeBenchJson(const ServeBenchOptions& o) {
  if (o.requests == 0 || !(o.rate > 0)) return InvalidArgument("need at least one request and a positive rate");
  if (o.shared_fraction < 0 || o.shared_fraction > 1) return InvalidArgument("shared fraction must be in 0..1");
  if (o.prefixes == 0 || o.prefix_tokens == 0 || o.suffix_tokens == 0 || o.unique_tokens < 5 || o.max_tokens == 0) {
    return InvalidArgument(
        "prefixes, prefix and suffix tokens and max tokens must be positive, unique tokens at least 5");
  }
  if (o.link_gbps < 0) return InvalidArgument("link rate must not be negative");
  std::vector<Config> configs;
  if (!o.url.empty()) {
    configs.push_back({.name = "external", .external = true});
  } else {
    for (const std::string& name : o.configs) {
      Config c{.name = name};
      if (name == "none") {
        c.reuse = false;
      } else if (auto scheduler = ParseScheduler(name); scheduler.ok()) {
        c.scheduler = *scheduler;
      } else {
        return InvalidArgument("unknown configuration '" + name + "' (none, fifo or kv-aware)");
      }
      configs.push_back(c);
    }
    if (configs.empty()) return InvalidArgument("no configurations to run");
  }

  // The prompts, cut from the text by tokens: the shared documents first, then each request's
  // own text in trace order, so no two requests send the same words after a document.
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(o.model_path));
  ASSIGN_OR_RETURN(const std::string text, ReadTextFile(BesideModel(o.model_path, "eval.txt", o.text_path)));
  ASSIGN_OR_RETURN(std::vector<int32_t> text_tokens, model->Tokenize(text, false));
  TextCutter cut(*model, std::move(text_tokens));
  // A prompt's first word loses its space: the tokenizer puts one back.
  auto strip = [](std::string s) { return s.substr(s.rfind(' ', 0) == 0 ? 1 : 0); };
  std::vector<std::string> documents;
  for (uint32_t d = 0; d < o.prefixes; ++d) {
    ASSIGN_OR_RETURN(std::string doc, cut.Next(o.prefix_tokens));
    documents.push_back(strip(std::move(doc)));
  }
  const std::vector<ServeTraceRequest> trace = MakeServeTrace(o);
  std::vector<std::string> prompts;
  for (const ServeTraceRequest& r : trace) {
    ASSIGN_OR_RETURN(std::string own, cut.Next(r.shared ? o.suffix_tokens : r.unique_tokens));
    prompts.push_back(r.shared ? documents[r.prefix] + own : strip(std::move(own)));
  }
  // Check what the servers will see: every shared prompt starts with its document's whole chunks
  // (else the comparison would measure a broken trace), and the context fits the longest prompt.
  const uint32_t chunk = ServerOptions{}.chunk_tokens;
  std::vector<std::vector<int32_t>> document_tokens;
  for (const std::string& d : documents) {
    ASSIGN_OR_RETURN(std::vector<int32_t> t, model->Tokenize(d, true));
    document_tokens.push_back(std::move(t));
  }
  size_t longest = 0;
  uint64_t reusable_shared = 0, prompt_shared = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<int32_t> t, model->Tokenize(prompts[i], true));
    longest = std::max(longest, t.size());
    if (!trace[i].shared) continue;
    const std::vector<int32_t>& d = document_tokens[trace[i].prefix];
    const size_t whole = (d.size() - 1) / chunk * chunk;
    if (t.size() <= whole || !std::equal(d.begin(), d.begin() + static_cast<ptrdiff_t>(whole), t.begin())) {
      return Internal(FormatMessage("request %zu's prompt does not start with its document's tokens", i));
    }
    reusable_shared += whole;
    prompt_shared += t.size();
  }
  model.reset();  // the servers load their own

  ServerOptions with_fetchers;
  with_fetchers.threads = o.threads;
  with_fetchers.fetch_threads = o.fetch_threads;
  // Every configuration gets the same llama.cpp threads, the no-reuse one too (it fetches nothing,
  // but the comparison is of scheduling, not of core counts).
  const int threads = ServerLlamaThreads(with_fetchers);
  ProgressBar progress("bench serve", configs.size() * (o.prefixes + o.requests), o.progress);
  Json configs_json = Json::array();
  for (const Config& c : configs) {
    std::unique_ptr<CompletionServer> server;
    std::string url = o.url;
    if (!c.external) {
      ServerOptions so;
      so.model_path = o.model_path;
      so.store_url = "mem://";  // each configuration starts with an empty store
      so.codec = o.codec;
      so.calibration = o.calibration;
      so.port = 0;
      so.link_gbps = o.link_gbps;
      so.plan_recompute = o.plan_recompute;
      so.n_ctx = static_cast<uint32_t>(longest) + o.max_tokens + 8;
      so.default_max_tokens = o.max_tokens;
      so.threads = threads;
      so.parallel = o.parallel;
      so.fetch_threads = o.fetch_threads;
      so.scheduler = c.scheduler;
      so.reuse = c.reuse;
      // What is compared is how each scheduler brings stored KV in: sequences kept from the
      // warm-up would serve the shared documents without any fetch.
      so.hot_tier = false;
      so.cache_ram_mib = 0;
      so.store_every_rung = true;  // the codec asked for is what is measured, on the in-memory store too
      ASSIGN_OR_RETURN(server, CompletionServer::Create(so));
      RETURN_IF_ERROR(server->Start());
      url = FormatMessage("http://127.0.0.1:%d", server->port());
    }

    // Warm-up: each shared document once, then its chunks written, as if earlier traffic had
    // stored them.
    const auto t_warm = Clock::now();
    for (const std::string& d : documents) {
      RETURN_IF_ERROR(CompleteOnce(url, d).WithContext(c.name + " warm-up"));
      progress.Advance();
    }
    RETURN_IF_ERROR(WaitForServerStores(url, kStoreDrainTimeoutS).WithContext(c.name));
    const double warmup_s = Seconds(Clock::now() - t_warm);

    // The replay: each request on its own thread, sent at its arrival time.
    std::vector<CompletionOutcome> outcomes(trace.size());
    const Clock::time_point t0 = Clock::now() + std::chrono::milliseconds(100);  // the threads are up by then
    std::vector<std::thread> clients;
    for (size_t i = 0; i < trace.size(); ++i) {
      clients.emplace_back([&, i] {
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(trace[i].arrival_s)));
        outcomes[i] = StreamCompletion(url, prompts[i], o.max_tokens, t0);
      });
    }
    for (std::thread& t : clients) {  // in arrival order, which is about finishing order
      t.join();
      progress.Advance();
    }
    if (server) server->Stop();

    double first_send = 0, last_finish = 0, send_lag = 0;
    uint64_t completion = 0, prompt = 0, cached = 0, ok = 0;
    Json errors = Json::array();
    for (size_t i = 0; i < trace.size(); ++i) {
      const CompletionOutcome& r = outcomes[i];
      first_send = i == 0 ? r.send_s : std::min(first_send, r.send_s);
      last_finish = std::max(last_finish, r.finish_s);
      send_lag = std::max(send_lag, r.send_s - trace[i].arrival_s);
      if (!r.ok) {
        if (errors.size() < 5) errors.push_back(FormatMessage("request %zu: %s", i, r.error.c_str()));
        continue;
      }
      ++ok;
      completion += r.completion_tokens;
      prompt += r.prompt_tokens;
      cached += r.cached_tokens;
    }
    const double makespan = last_finish - first_send;
    Json j;
    j["name"] = c.name;
    if (c.external) {
      j["url"] = o.url;
    } else {
      j["scheduler"] = SchedulerName(c.scheduler);
      j["reuse"] = c.reuse;
    }
    j["warmup_s"] = warmup_s;
    j["classes"] = {{ClassName(true), ClassStats(trace, outcomes, true)},
                    {ClassName(false), ClassStats(trace, outcomes, false)}};
    j["errors"] = trace.size() - ok;
    j["error_examples"] = std::move(errors);
    j["makespan_s"] = makespan;
    j["completion_tokens_per_s"] = makespan > 0 ? static_cast<double>(completion) / makespan : 0.0;
    j["requests_per_s"] = makespan > 0 ? static_cast<double>(ok) / makespan : 0.0;
    j["hit_rate"] = prompt ? static_cast<double>(cached) / static_cast<double>(prompt) : 0.0;
    // How late the generator sent against the trace: large values mean the client was starved.
    j["max_send_lag_s"] = send_lag;
    Json rows = Json::array();
    for (size_t i = 0; i < trace.size(); ++i) {
      const CompletionOutcome& r = outcomes[i];
      Json row;
      row["class"] = ClassName(trace[i].shared);
      row["arrival_s"] = trace[i].arrival_s;
      row["ok"] = r.ok;
      row["ttft_s"] = r.ok && r.got_token ? Json(r.first_token_s - r.send_s) : Json();
      row["latency_s"] = r.finish_s - r.send_s;
      row["prompt_tokens"] = r.prompt_tokens;
      row["cached_tokens"] = r.cached_tokens;
      row["completion_tokens"] = r.completion_tokens;
      rows.push_back(std::move(row));
    }
    j["requests"] = std::move(rows);
    configs_json.push_back(std::move(j));
  }
  progress.Finish();

  // The comparison the serving work is judged by (docs/results.md): with the KV-aware scheduler,
  // no-prefix requests keep their TTFT (p90 within 1.2x of no reuse) while FIFO makes them wait
  // behind fetches (p90 beyond that 1.2x), and shared-prefix requests get their first token
  // sooner (p50 below no reuse). "met" is all three.
  auto find = [&](const char* name) -> const Json* {
    for (const Json& c : configs_json) {
      if (c["name"] == name) return &c;
    }
    return nullptr;
  };
  auto ttft = [](const Json* c, bool shared, const char* p) {
    return (*c)["classes"][ClassName(shared)]["ttft_s"][p].get<double>();
  };
  auto ratio = [](double a, double b) { return b > 0 ? Json(a / b) : Json(); };
  Json criteria = Json::object();
  const Json* none = find("none");
  const Json* fifo = find("fifo");
  const Json* kv = find("kv-aware");
  if (none && kv) {
    criteria["kv_aware_no_prefix_p90_over_none"] = ratio(ttft(kv, false, "p90"), ttft(none, false, "p90"));
    criteria["kv_aware_shared_p50_over_none"] = ratio(ttft(kv, true, "p50"), ttft(none, true, "p50"));
  }
  if (none && fifo) {
    criteria["fifo_no_prefix_p90_over_none"] = ratio(ttft(fifo, false, "p90"), ttft(none, false, "p90"));
  }
  if (fifo && kv) {  // the schedulers side by side, whatever the baseline does
    criteria["fifo_no_prefix_p90_over_kv_aware"] = ratio(ttft(fifo, false, "p90"), ttft(kv, false, "p90"));
  }
  if (none && kv && fifo && criteria["kv_aware_no_prefix_p90_over_none"].is_number() &&
      criteria["fifo_no_prefix_p90_over_none"].is_number() && criteria["kv_aware_shared_p50_over_none"].is_number()) {
    const double k = criteria["kv_aware_no_prefix_p90_over_none"].get<double>();
    const double f = criteria["fifo_no_prefix_p90_over_none"].get<double>();
    const double s = criteria["kv_aware_shared_p50_over_none"].get<double>();
    criteria["met"] = k <= 1.2 && f > 1.2 && s < 1.0;
  }

  Json opts;
  opts["model"] = o.model_path;
  opts["text"] = BesideModel(o.model_path, "eval.txt", o.text_path);
  opts["rate"] = o.rate;
  opts["requests"] = o.requests;
  opts["shared_fraction"] = o.shared_fraction;
  opts["prefixes"] = o.prefixes;
  opts["prefix_tokens"] = o.prefix_tokens;
  opts["suffix_tokens"] = o.suffix_tokens;
  opts["unique_tokens"] = o.unique_tokens;
  opts["max_tokens"] = o.max_tokens;
  opts["chunk_tokens"] = chunk;
  opts["seed"] = o.seed;
  if (o.url.empty()) {
    // The in-process servers' settings (a running server has its own).
    opts["codec"] = o.codec;
    opts["link_gbps"] = o.link_gbps;
    opts["plan_recompute"] = o.plan_recompute;
    opts["parallel"] = o.parallel;
    opts["fetch_threads"] = o.fetch_threads;
    opts["threads"] = threads;
  } else {
    opts["url"] = o.url;
  }
  Json j;
  j["options"] = std::move(opts);
  // The best hit rate the shared class can have: its whole chunks of the document, over its prompts.
  j["shared_reusable_fraction"] =
      prompt_shared ? static_cast<double>(reusable_shared) / static_cast<double>(prompt_shared) : 0.0;
  j["configs"] = std::move(configs_json);
  j["criteria"] = std::move(criteria);
  return j.dump(2);
}

}  // namespace kvc
