// `kvcodec serve`: openAI-compatible completion server with remote KV reuse.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"
#include "store/store.h"

namespace kvcodec_cli {
namespace {

struct ServeArgs {
  std::string model = DefaultModel(), store, store_secret, codec = "kvtc", calibration, host = "127.0.0.1", alias;
  std::string chat_template, api_key, metrics_key;
  int port = 8080;
  double link_gbps = 0;
  uint64_t max_body = 1 << 20;
  double request_timeout = 30;
  int max_connections = 512;
  uint32_t n_ctx = 4096, max_tokens = 64;
  int threads = 0, parallel = 4, fetch_threads = 1;
  std::string scheduler = "kv-aware";
  bool no_reuse = false;
  QualityArgs quality;
};

int RunServe(const ServeArgs& a) {
  // SIGINT/SIGTERM are taken by this thread alone (blocked before any server thread exists), so
  // shutdown runs here, not in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  kvc_serve_params p{};
  p.model_path = a.model.c_str();
  p.store_url = a.store.empty() ? nullptr : a.store.c_str();
  p.codec = a.codec.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.host = a.host.c_str();
  p.port = a.port;
  p.link_gbps = a.link_gbps;
  p.n_ctx = a.n_ctx;
  p.default_max_tokens = a.max_tokens;
  p.n_threads = a.threads;
  p.n_parallel = a.parallel;
  p.n_fetch_threads = a.fetch_threads;
  p.scheduler = a.scheduler.c_str();
  p.no_reuse = a.no_reuse ? 1 : 0;
  a.quality.Set(&p);
  p.store_secret = a.store_secret.empty() ? nullptr : a.store_secret.c_str();
  p.max_body_bytes = a.max_body;
  p.request_timeout_s = a.request_timeout;
  p.max_connections = a.max_connections;
  p.alias = a.alias.empty() ? nullptr : a.alias.c_str();
  p.chat_template = a.chat_template.empty() ? nullptr : a.chat_template.c_str();
  p.api_key = a.api_key.empty() ? nullptr : a.api_key.c_str();
  p.metrics_key = a.metrics_key.empty() ? nullptr : a.metrics_key.c_str();
  kvc_server* server = nullptr;
  if (kvc_server_create(&p, &server) != KVC_OK) return Fail(kvc_last_error());
  if (kvc_server_start(server) != KVC_OK) {
    const std::string error = kvc_last_error();
    kvc_server_free(server);
    return Fail(error);
  }
  // The URL as the user typed it may hold a Redis password: never printed.
  const std::string store = a.store.empty() ? "default" : Printable(kvc::RedactedUrl(a.store));
  std::fprintf(stderr, "kvcodec: serving %s on http://%s:%d (store %s); SIGINT or SIGTERM stops\n",
               Printable(a.model).c_str(), Printable(a.host).c_str(), kvc_server_port(server), store.c_str());
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kvcodec: signal %d, finishing the requests in flight and stopping\n", sig);
  kvc_server_stop(server);
  kvc_server_free(server);
  return 0;
}

}  // namespace

Command AddServeCommand(CLI::App* parent) {
  auto sv = std::make_shared<ServeArgs>();
  auto* serve = parent->add_subcommand("serve", "OpenAI-compatible completion server with remote KV reuse");
  AddModelOption(serve, &sv->model);
  serve->add_option("--store", sv->store,
                    "Store URL: dir:///path, mem://, redis://[user[:password]@]host:port, "
                    "redis-cluster://[user[:password]@]h:p,... (default: the embedded disk store). A store that is "
                    "down is retried in the background while requests recompute");
  serve->add_option("--store-secret", sv->store_secret, kStoreSecretHelp)->envname("KVCODEC_STORE_SECRET");
  serve->add_option("--max-body", sv->max_body, "Largest request body in bytes (larger: 413)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  serve
      ->add_option("--request-timeout", sv->request_timeout,
                   "Seconds a request may take to arrive whole (slower: 408, connection closed)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  serve
      ->add_option("--max-connections", sv->max_connections,
                   "Requests served at once, a thread each (a slow head holds none; /health and /metrics have "
                   "threads of their own)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  serve->add_option("--codec", sv->codec, "Codec for new chunks")->capture_default_str();
  AddCalibrationOption(serve, &sv->calibration);
  sv->quality.AddTo(serve);
  serve->add_option("--host", sv->host, "Address to listen on")->capture_default_str();
  serve->add_option("--alias", sv->alias,
                    "Model id clients see in /v1/models and responses (default: the model's file name without .gguf)");
  serve->add_option("--chat-template", sv->chat_template,
                    "Chat template: a llama.cpp built-in's name (chatml, llama3, mistral-v7, ...) or a template's "
                    "text (default: the model's own; without one, \"role: content\" lines)");
  serve
      ->add_option("--api-key", sv->api_key,
                   "Require \"Authorization: Bearer KEY\" on every endpoint but /health and /metrics")
      ->envname("KVCODEC_API_KEY");
  serve->add_option("--metrics-key", sv->metrics_key, "Require \"Authorization: Bearer KEY\" on /metrics")
      ->envname("KVCODEC_METRICS_KEY");
  serve->add_option("--port", sv->port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  serve->add_option("--link-gbps", sv->link_gbps, "Cap the fetch link at this rate (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--ctx", sv->n_ctx, "Tokens per request (prompt + completion)")->capture_default_str();
  serve->add_option("--max-tokens", sv->max_tokens, "Completion tokens when a request does not say")
      ->capture_default_str();
  serve->add_option("--threads", sv->threads, "Threads for llama.cpp (0: the cores --fetch-threads leave)");
  serve->add_option("--parallel", sv->parallel, "Requests decoded together (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  serve
      ->add_option("--fetch-threads", sv->fetch_threads,
                   "Pool workers fetched chunks decode on and new chunks encode on (the cores reuse takes from "
                   "generation)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  serve
      ->add_option("--scheduler", sv->scheduler,
                   "kv-aware: requests with nothing to fetch never wait for "
                   "another's fetch; fifo: strict arrival order")
      ->capture_default_str()
      ->check(CLI::IsMember({"kv-aware", "fifo"}));
  serve->add_flag("--no-reuse", sv->no_reuse, "Never look up, fetch or store chunks (the baseline)");
  return {serve, [sv] { return RunServe(*sv); }};
}

}  // namespace kvcodec_cli
