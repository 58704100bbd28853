// `kvcodec serve`: an OpenAI-compatible completion server with remote KV reuse.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "serve/completion_server.h"
#include "store/store.h"

namespace kvcodec_cli {
namespace {

struct ServeArgs {
  kvc::ServerOptions o;  // bound to the options; the scheduler and reuse set from theirs
  std::string scheduler = kvc::SchedulerName(kvc::ServerOptions{}.scheduler);
  bool no_reuse = false;
  bool no_hot_tier = false;
  bool jinja = true;
  std::string api_key_file;
  ServeArgs() { o.model_path = DefaultModel(); }
};

// llama-server's --api-key-file: a key per line; empty lines and lines starting with '#' skipped.
kvc::Result<std::string> ReadApiKeys(const std::string& path, std::string keys) {
  std::ifstream in(path);
  if (!in) return kvc::NotFound("cannot read the API key file " + Printable(path));
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    if (line.find(',') != std::string::npos) {
      return kvc::InvalidArgument("an API key in " + Printable(path) + " holds a comma, which separates keys");
    }
    keys += (keys.empty() ? "" : ",") + line;
  }
  if (keys.empty()) return kvc::InvalidArgument("the API key file " + Printable(path) + " holds no key");
  return keys;
}

int RunServe(ServeArgs& a) {
  kvc::ServerOptions& o = a.o;
  if (!a.api_key_file.empty()) {
    auto keys = ReadApiKeys(a.api_key_file, o.api_key);
    if (!keys.ok()) return Fail(keys.status());
    o.api_key = *keys;
  }
  // llama-server keeps saved slots in this folder; here they are records in the chunk store,
  // which is this folder unless --store names another.
  if (!o.slot_save_path.empty() && o.store_url.empty()) o.store_url = "dir://" + o.slot_save_path;
  auto scheduler = kvc::ParseScheduler(a.scheduler);
  if (!scheduler.ok()) return Fail(scheduler.status());
  o.scheduler = *scheduler;
  o.reuse = !a.no_reuse;
  o.hot_tier = !a.no_hot_tier;
  // SIGINT/SIGTERM are taken by this thread alone (blocked before any server thread exists), so
  // shutdown runs here, not in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto created = kvc::CompletionServer::Create(o);
  if (!created.ok()) return Fail(created.status());
  const std::unique_ptr<kvc::CompletionServer>& server = *created;
  if (kvc::Status started = server->Start(); !started.ok()) return Fail(started);
  // The URL as the user typed it may hold a Redis password: never printed.
  const std::string store = o.store_url.empty() ? "default" : Printable(kvc::RedactedUrl(o.store_url));
  std::fprintf(stderr, "kvcodec: serving %s on http://%s:%d (store %s); SIGINT or SIGTERM stops\n",
               Printable(o.model_path).c_str(), Printable(o.host).c_str(), server->port(), store.c_str());
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kvcodec: signal %d, finishing the requests in flight and stopping\n", sig);
  server->Stop();
  return 0;
}

}  // namespace

// The server's limits, parallel sequences, fetch threads, context, link rate and quality limits
// are checked by kvc::CompletionServer::Create, the scheduler's name by kvc::ParseScheduler;
// the checks below have no counterpart there.
Command AddServeCommand(CLI::App* parent) {
  auto sv = std::make_shared<ServeArgs>();
  kvc::ServerOptions& o = sv->o;
  auto* serve = parent->add_subcommand("serve", "OpenAI-compatible completion server with remote KV reuse");
  AddModelOption(serve, &o.model_path);
  serve->add_option("--store", o.store_url,
                    "Store URL: dir:///path, mem://, redis://[user[:password]@]host:port, "
                    "redis-cluster://[user[:password]@]h:p,... (default: the embedded disk store). A store that is "
                    "down is retried in the background while requests recompute");
  serve->add_option("--store-secret", o.store_secret, kStoreSecretHelp)->envname("KVCODEC_STORE_SECRET");
  serve->add_option("--max-body", o.max_body_bytes, "Largest request body in bytes (larger: 413)")
      ->capture_default_str();
  serve
      ->add_option("--request-timeout", o.request_timeout_s,
                   "Seconds a request may take to arrive whole (slower: 408, connection closed)")
      ->capture_default_str();
  serve
      ->add_option("--max-connections", o.max_connections,
                   "Requests served at once, a thread each (a slow head holds none; /health and /metrics have "
                   "threads of their own)")
      ->capture_default_str();
  serve->add_option("--codec", o.codec, "Codec for new chunks")->capture_default_str();
  // Its range is the library's to check (the same message as run's).
  serve->add_option("--chunk", o.chunk_tokens, "Tokens per chunk")->capture_default_str();
  AddCalibrationOption(serve, &o.calibration);
  AddQualityOptions(serve, &o.profile, &o.quality);
  serve->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  serve->add_option("-a,--alias", o.alias,
                    "Model id clients see in /v1/models and responses (default: the model's file name without .gguf)");
  serve->add_option("--chat-template", o.chat_template,
                    "Chat template: a llama.cpp built-in's name (chatml, llama3, mistral-v7, ...) or a template's "
                    "text (default: the model's own; without one, \"role: content\" lines)");
  serve
      ->add_option("--api-key", o.api_key,
                   "Require \"Authorization: Bearer KEY\" (or \"X-Api-Key: KEY\") on every endpoint but /health and "
                   "/metrics; several keys separated by commas")
      ->envname("KVCODEC_API_KEY");
  serve->add_option("--api-key-file", sv->api_key_file,
                    "File of API keys, one per line (lines starting with # skipped), as llama-server's");
  serve->add_flag("--jinja,!--no-jinja", sv->jinja,
                  "Accepted as llama-server's: chat prompts are always the model's chat template (or "
                  "--chat-template), applied by llama.cpp's template matcher, which knows the common templates");
  serve->add_option("--slot-save-path", o.slot_save_path,
                    "Turn on POST /slots/{id}?action=save|restore (llama-server's); a saved slot is a record in the "
                    "store, and this folder is the store unless --store names another");
  serve->add_option("--metrics-key", o.metrics_key, "Require \"Authorization: Bearer KEY\" on /metrics")
      ->envname("KVCODEC_METRICS_KEY");
  serve->add_option("--port", o.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  serve->add_option("--link-gbps", o.link_gbps, "Cap the fetch link at this rate (0: none)")->capture_default_str();
  serve->add_option("-c,--ctx,--ctx-size", o.n_ctx, "Tokens per request (prompt + completion)")->capture_default_str();
  serve->add_option("--max-tokens", o.default_max_tokens, "Completion tokens when a request does not say")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  serve->add_option("-t,--threads", o.threads, "Threads for llama.cpp (0: the cores --fetch-threads leave)");
  // And llama-server's -np (SpellOutLlamaServerFlags).
  serve->add_option("--parallel", o.parallel, "Requests decoded together (continuous batching)")->capture_default_str();
  serve
      ->add_option("--fetch-threads", o.fetch_threads,
                   "Pool workers fetched chunks decode on and new chunks encode on (the cores reuse takes from "
                   "generation)")
      ->capture_default_str();
  serve
      ->add_option("--scheduler", sv->scheduler,
                   "kv-aware: requests with nothing to fetch never wait for "
                   "another's fetch; fifo: strict arrival order")
      ->capture_default_str();
  serve->add_flag("--no-reuse", sv->no_reuse, "Never look up, fetch or store chunks (the baseline)");
  serve->add_flag("--store-every-rung", o.store_every_rung,
                  "Store new chunks at every rung the quality floor allows even on a local store with no --link-gbps, "
                  "where only raw fp16 is stored (what every fetch there takes)");
  serve
      ->add_option("--cache-ram", o.cache_ram_mib,
                   "MiB of host memory for decoded chunks computed here lately (behind the hot tier, in front of "
                   "the store: a fetch copies what it holds); 0: none")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30))
      ->capture_default_str();
  serve->add_flag("--flash-attn", o.flash_attn,
                  "Use llama.cpp's flash attention (llama-server's -fa): a faster prefill on most backends");
  serve->add_flag("--no-hot-tier", sv->no_hot_tier,
                  "Free a finished request's KV at once instead of keeping it in llama.cpp's memory for a later "
                  "request that shares its prefix");
  return {serve, [sv] { return RunServe(*sv); }};
}

std::vector<std::string> SpellOutLlamaServerFlags(std::vector<std::string> args) {
  const auto serve = std::find(args.begin(), args.end(), "serve");
  if (serve == args.end()) return args;
  std::vector<std::string> out(args.begin(), serve + 1);
  for (auto it = serve + 1; it != args.end(); ++it) {
    if (*it == "-np") {
      out.push_back("--parallel");
    } else if (*it == "-fa" || *it == "--flash-attn") {
      // llama-server's -fa takes on, off or auto (auto: on where the backend has it, as the CPU does).
      const bool valued = it + 1 != args.end() && (it[1] == "on" || it[1] == "off" || it[1] == "auto");
      if (!valued || it[1] != "off") out.push_back("--flash-attn");
      if (valued) ++it;
    } else {
      out.push_back(*it);
    }
  }
  return out;
}

}  // namespace kvcodec_cli
