// `kvcodec serve`: an OpenAI-compatible completion server with remote KV reuse.
// POST /v1/completions and /v1/chat/completions (JSON or server-sent events, as OpenAI's: sampling,
// stop strings, n choices, logprobs, echo, the model's chat template), GET /v1/models, POST
// /tokenize and /detokenize (as llama.cpp's server has them), GET /health and GET /metrics
// (Prometheus text); optional bearer-key auth. Each request restores its prompt's longest stored prefix
// through the fetcher, prefills the rest and generates; its new chunks are encoded and stored
// by a background thread after the response. The store may be down (Redis stopped, a wrong
// password): the server starts and serves anyway, by recomputing, reports the store on /health
// and /metrics, and reconnects with back-off (store/reconnecting_store.h).
//
// Continuous batching: up to `parallel` requests decode together in one llama.cpp batch, each on
// its own sequence; a request joins the running batch as soon as a sequence is free and its KV
// is ready, and leaves it when it finishes or its client goes away (streamed or not: a client
// that closes its connection cancels its request).
//
// Text out is always valid UTF-8 (a character a byte-fallback model spells over several tokens
// is sent whole), and nothing a request does can end the process: an unexpected exception is a
// 500 `server_error` for that request alone.
//
// Scheduling: with the KV-fetch-aware scheduler a request with a stored prefix
// waits in the waiting-for-KV queue while fetch threads (a bounded number, `fetch_threads`)
// bring its chunks in and decode them, and requests with nothing to fetch go straight to the
// batch. The FIFO scheduler admits requests strictly in arrival order, so a request behind one
// whose prefix is still arriving waits for it (the comparison `kvcodec bench serve` makes).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "reuse/model_profile.h"

namespace kvc {

struct ServerOptions {
  std::string model_path;
  std::string store_url;       // empty: DefaultStoreUrl()
  std::string store_secret;    // non-empty: objects sealed and checked with HMAC-SHA256 (StoreOptions)
  std::string codec = "kvtc";  // stored within the quality floor (PlanStoredRungs)
  std::string calibration;
  std::string profile;    // quality profile; empty: <model>.kvprof.json beside the model, if any
  QualityLimits quality;  // which profiled rungs may be stored and fetched
  // The model id clients see (GET /v1/models and the "model" of every response); empty: the
  // model's file name without .gguf.
  std::string alias;
  // Chat requests are formatted with this chat template (a llama.cpp built-in's name such as
  // "chatml", or a template's text); empty: the model's own (GGUF tokenizer.chat_template), or
  // "role: content" lines for a model without one.
  std::string chat_template;
  // Non-empty: every endpoint but /health and /metrics needs "Authorization: Bearer <api_key>"
  // or "X-Api-Key: <api_key>" (else a 401 JSON error); /metrics needs "Bearer <metrics_key>" when
  // that is set. Either may list several keys, separated by commas (as llama-server's --api-key).
  std::string api_key;
  std::string metrics_key;
  std::string host = "127.0.0.1";
  int port = 8080;        // 0: any free port (see CompletionServer::port)
  double link_gbps = 0;   // in-process link cap for fetches; 0: none
  uint32_t n_ctx = 4096;  // tokens per request, prompt and completion together
  uint32_t chunk_tokens = 256;
  uint32_t default_max_tokens = 64;
  // false: always fetch stored chunks, never plan a recompute (benchmarks and tests that need
  // fetches to happen whatever this machine's prefill speed).
  bool plan_recompute = true;
  // Seconds to prefill one chunk wherever it is, what prices a recompute and the prefilled side of
  // a split (batch_scheduler.h); 0: measured at start-up by position (MeasurePrefillCost) and
  // refitted to the prefills the server runs. Given, it is fixed, and the plans do not depend on
  // how busy the machine is (tests).
  double chunk_prefill_s = 0;
  int threads = 0;        // llama.cpp threads; 0: the cores the fetch threads leave (at least 1)
  int parallel = 4;       // sequences decoded together (continuous batching)
  int fetch_threads = 1;  // threads fetching and decoding stored prefixes, and encoding new chunks
                          // (the share of the cores that reuse may take from generation)
  enum class Scheduler { kKvAware, kFifo };
  Scheduler scheduler = Scheduler::kKvAware;
  bool reuse = true;  // false: never look up, fetch or store chunks (the no-reuse baseline)
  // Keep a finished request's KV in llama.cpp's memory while its sequence is free, for a later
  // request sharing its prefix (BatchScheduler: the hot tier). With reuse only.
  bool hot_tier = true;
  // llama.cpp's flash attention (llama-server's -fa): a faster prefill on most backends; V is then
  // kept untransposed in llama.cpp's cache (the stored chunks are the same KV either way).
  bool flash_attn = false;
  // The host-memory tier's limit in MiB (decoded chunks computed here lately, behind the hot
  // tier: BatchScheduler); 0: none. With reuse only.
  uint64_t cache_ram_mib = 1024;
  // Non-empty: POST /slots/{id}?action=save|restore are on (llama-server's --slot-save-path). A
  // saved slot is a record in the store naming the tokens its sequence held; their KV is in the
  // store's chunks. `kvcodec serve` makes this folder the store when --store is not given.
  std::string slot_save_path;
  // Store every rung the plan has even where readers will fetch only raw fp16 (a local store
  // with no link cap: RungsReadersFetch).
  bool store_every_rung = false;
  // A store that is down is tried again after 0.5 s, then after twice as long each time, up to
  // this many seconds.
  double store_retry_max_s = 30;

  // Limits for clients that send too much or too slowly (the server reads hostile input).
  // A request body over this many bytes is refused with a 413 (a JSON error) before it is read.
  size_t max_body_bytes = size_t{1} << 20;
  // A request (its line, headers and body) must arrive within this many seconds of its first
  // byte, or it gets a 408 and its connection is closed; a client that waits more than 5 s
  // between two bytes is cut off at once.
  double request_timeout_s = 30;
  // Requests served at once, each on its own thread (started as needed): a client that sends
  // its body slowly holds only its own, and one that sends its head slowly holds none (heads
  // are read before a thread is given). Beyond this, requests wait for a thread; /health and
  // /metrics are answered meanwhile on a few threads of their own.
  int max_connections = 512;
};

// The llama.cpp threads a server with these options runs: `threads`, or the cores the fetch
// threads leave (at least one).
int ServerLlamaThreads(const ServerOptions& options);

// "kv-aware" or "fifo".
Result<ServerOptions::Scheduler> ParseScheduler(const std::string& name);
const char* SchedulerName(ServerOptions::Scheduler scheduler);

class CompletionServer {
 public:
  // Every option checked (the reuse ones by the reuse set-up that `run` shares,
  // reuse/reuse_setup.h), then the model loaded, its floor decided and the store opened.
  static Result<std::unique_ptr<CompletionServer>> Create(const ServerOptions& options);
  ~CompletionServer();
  CompletionServer(const CompletionServer&) = delete;
  CompletionServer& operator=(const CompletionServer&) = delete;

  // Binds and starts serving on background threads; returns once the socket listens. A port
  // another process (or server) listens on is an error: the socket is not shared.
  Status Start();
  int port() const;
  // Stops accepting, finishes the requests already admitted, drains the background stores.
  void Stop();
  // Blocks until Stop() (from another thread or a signal watcher) has completed.
  void Wait();

  struct Impl;

 private:
  explicit CompletionServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvc
