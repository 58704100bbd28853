// `kvcodec serve`: an OpenAI-compatible completion server with remote KV reuse (design brief §3).
// POST /v1/completions and /v1/chat/completions (JSON or server-sent events), GET /health and
// GET /metrics (Prometheus text). Each request restores its prompt's longest stored prefix
// through the fetcher, prefills the rest and generates; its new chunks are encoded and stored
// by a background thread after the response.
//
// A request with a stored prefix fetches and decodes it without holding the llama.cpp sequence
// (the waiting-for-KV queue), so requests with nothing to fetch are not held up by transfers.
// Where this stands (issue 6): generation runs one request at a time on one sequence;
// continuous batching over several sequences is not built yet.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace kvc {

struct ServerOptions {
  std::string model_path;
  std::string store_url;   // empty: DefaultStoreUrl()
  std::string codec = "kvtc";
  std::string calibration;
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: any free port (see CompletionServer::port)
  double link_gbps = 0;    // in-process link cap for fetches; 0: none
  uint32_t n_ctx = 4096;   // tokens per request, prompt and completion together
  uint32_t chunk_tokens = 256;
  uint32_t default_max_tokens = 64;
  // false: always fetch stored chunks, never plan a recompute (benchmarks and tests that need
  // fetches to happen whatever this machine's prefill speed).
  bool plan_recompute = true;
  int threads = 0;
};

class CompletionServer {
 public:
  static Result<std::unique_ptr<CompletionServer>> Create(const ServerOptions& options);
  ~CompletionServer();
  CompletionServer(const CompletionServer&) = delete;
  CompletionServer& operator=(const CompletionServer&) = delete;

  // Binds and starts serving on background threads; returns once the socket listens.
  Status Start();
  int port() const;
  // Stops accepting, lets the request being generated finish, drains the background stores.
  void Stop();
  // Blocks until Stop() (from another thread or a signal watcher) has completed.
  void Wait();

  struct Impl;

 private:
  explicit CompletionServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvc
