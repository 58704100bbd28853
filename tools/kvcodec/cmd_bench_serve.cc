// `kvcodec bench serve`: load generator for the completion server: shared-prefix and no-prefix streaming requests at a
// .

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"
#include "kvcodec_tools.h"

namespace kvcodec_cli {
namespace {

struct BenchServeArgs {
  std::string model = DefaultModel(), text, calibration, codec = "kvtc", configs = "none,fifo,kv-aware", url;
  double link_gbps = 0.003, rate = 0.75, shared_fraction = 0.5;
  uint32_t requests = 60, prefixes = 4, prefix_tokens = 3072, suffix_tokens = 24, unique_tokens = 160, max_tokens = 16;
  int parallel = 8, fetch_threads = 1, threads = 0;
  uint64_t seed = 1;
  bool plan_recompute = false, json = false, quiet = false;
};

int RunBenchServe(const BenchServeArgs& a) {
  kvc_bench_serve_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.codec = a.codec.c_str();
  p.configs = a.configs.c_str();
  p.url = a.url.empty() ? nullptr : a.url.c_str();
  p.link_gbps = a.link_gbps;
  p.rate = a.rate;
  p.shared_fraction = a.shared_fraction;
  p.requests = a.requests;
  p.prefixes = a.prefixes;
  p.prefix_tokens = a.prefix_tokens;
  p.suffix_tokens = a.suffix_tokens;
  p.unique_tokens = a.unique_tokens;
  p.max_tokens = a.max_tokens;
  p.n_parallel = a.parallel;
  p.n_fetch_threads = a.fetch_threads;
  p.n_threads = a.threads;
  p.seed = a.seed;
  p.plan_recompute = a.plan_recompute ? 1 : 0;
  p.quiet = a.quiet ? 1 : 0;
  auto report = kvcodec::BenchServeJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  const auto& o = j["options"];
  const std::string against = o.contains("url")                  ? "server " + o["url"].get<std::string>()
                              : o["link_gbps"].get<double>() > 0 ? "link " + FormatGbps(o["link_gbps"].get<double>())
                                                                 : std::string("uncapped link");
  std::printf(
      "%u requests per configuration at %g/s, %.0f%% sharing one of %u %u-token documents, %u tokens "
      "generated each; %s\n",
      o["requests"].get<unsigned>(), o["rate"].get<double>(), 100 * o["shared_fraction"].get<double>(),
      o["prefixes"].get<unsigned>(), o["prefix_tokens"].get<unsigned>(), o["max_tokens"].get<unsigned>(),
      Printable(against).c_str());
  std::printf("  %-9s %-13s %4s %4s %8s %8s %8s %8s %9s %8s\n", "config", "class", "n", "err", "TTFT p50", "p90", "p99",
              "hit rate", "tok/s", "req/s");
  for (const auto& c : j["configs"]) {
    bool first = true;
    for (const char* cls : {"shared_prefix", "no_prefix"}) {
      const auto& k = c["classes"][cls];
      std::printf("  %-9s %-13s %4d %4d %8.3f %8.3f %8.3f %8.3f", first ? Printable(c["name"]).c_str() : "", cls,
                  k["n"].get<int>(), k["errors"].get<int>(), k["ttft_s"]["p50"].get<double>(),
                  k["ttft_s"]["p90"].get<double>(), k["ttft_s"]["p99"].get<double>(), k["hit_rate"].get<double>());
      if (first) {
        std::printf(" %9.1f %8.2f", c["completion_tokens_per_s"].get<double>(), c["requests_per_s"].get<double>());
      }
      std::printf("\n");
      first = false;
    }
  }
  for (const auto& [key, value] : j["criteria"].items())
    std::printf("  %s: %s\n", Printable(key).c_str(), Printable(value.dump()).c_str());
  return 0;
}

}  // namespace

Command AddBenchServeCommand(CLI::App* parent) {
  auto bs = std::make_shared<BenchServeArgs>();
  auto* bench_serve = parent->add_subcommand(
      "serve",
      "Load generator for the completion server: shared-prefix and no-prefix streaming requests at a "
      "Poisson rate against no reuse, FIFO and KV-aware in-process servers; TTFT p50/p90/p99 per class, "
      "throughput, hit rate");
  AddModelOption(bench_serve, &bs->model);
  bench_serve->add_option("--text", bs->text, "Text the prompts are cut from (default: eval.txt beside the model)");
  AddCalibrationOption(bench_serve, &bs->calibration);
  bench_serve->add_option("--codec", bs->codec, "Codec the servers store chunks with")->capture_default_str();
  bench_serve->add_option("--configs", bs->configs, "Configurations, comma-separated: none, fifo, kv-aware")
      ->capture_default_str();
  bench_serve->add_option("--url", bs->url, "Instead, one configuration against a running server (http://host:port)");
  bench_serve->add_option("--link-gbps", bs->link_gbps, "The in-process servers' fetch link cap (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bench_serve->add_option("--rate", bs->rate, "Requests per second (Poisson arrivals)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench_serve->add_option("--requests", bs->requests, "Requests per configuration")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  bench_serve->add_option("--shared-fraction", bs->shared_fraction, "Fraction of requests sharing a long prefix")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  bench_serve->add_option("--prefixes", bs->prefixes, "Distinct shared documents")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  bench_serve->add_option("--prefix-tokens", bs->prefix_tokens, "Tokens per shared document")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--suffix-tokens", bs->suffix_tokens, "Each shared-prefix request's own tokens after it")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--unique-tokens", bs->unique_tokens, "No-prefix prompt length (0.8x to 1.2x this)")
      ->capture_default_str()
      ->check(CLI::Range(5u, 1u << 20));
  bench_serve->add_option("--max-tokens", bs->max_tokens, "Completion tokens per request")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--parallel", bs->parallel, "The servers' requests decoded together")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  bench_serve
      ->add_option("--fetch-threads", bs->fetch_threads, "The servers' pool workers for decoding and encoding chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  bench_serve->add_option("--threads", bs->threads, "Threads for llama.cpp (0: the cores the fetch threads leave)");
  bench_serve->add_option("--seed", bs->seed, "Seed of the trace (arrivals, classes, prompts)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  bench_serve->add_flag("--plan-recompute", bs->plan_recompute,
                        "Let the servers' planner recompute chunks it predicts faster to prefill than to fetch "
                        "(default: always fetch, so every configuration schedules the same fetches)");
  AddJsonFlag(bench_serve, &bs->json);
  AddQuietFlag(bench_serve, &bs->quiet);
  return {bench_serve, [bs] { return RunBenchServe(*bs); }};
}

}  // namespace kvcodec_cli
