// `kvcodec bench serve`: a load generator for the completion server: shared-prefix and no-prefix streaming requests
// at a Poisson rate against in-process servers with no reuse, FIFO and KV-aware scheduling.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/comma_list.h"
#include "bench/serve_bench.h"
#include "cli_common.h"
#include "commands.h"

namespace kvcodec_cli {
namespace {

struct BenchServeArgs {
  kvc::ServeBenchOptions o;  // bound to the options; configurations and progress set from theirs
  std::string configs = "none,fifo,kv-aware";
  bool json = false, quiet = false;
  BenchServeArgs() { o.model_path = DefaultModel(); }
};

int RunBenchServe(BenchServeArgs& a) {
  a.o.configs = kvc::SplitCommaList(a.configs);
  a.o.progress = !a.quiet;
  auto report = kvc::RunServeBenchJson(a.o);
  if (!report.ok()) return Fail(report.status());
  if (a.json) {
    std::cout << *report << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(*report);
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
  kvc::ServeBenchOptions& o = bs->o;
  auto* bench_serve = parent->add_subcommand(
      "serve",
      "Load generator for the completion server: shared-prefix and no-prefix streaming requests at a "
      "Poisson rate against no reuse, FIFO and KV-aware in-process servers; TTFT p50/p90/p99 per class, "
      "throughput, hit rate");
  AddModelOption(bench_serve, &o.model_path);
  bench_serve->add_option("--text", o.text_path, "Text the prompts are cut from (default: eval.txt beside the model)");
  AddCalibrationOption(bench_serve, &o.calibration);
  bench_serve->add_option("--codec", o.codec, "Codec the servers store chunks with")->capture_default_str();
  bench_serve->add_option("--configs", bs->configs, "Configurations, comma-separated: none, fifo, kv-aware")
      ->capture_default_str();
  bench_serve->add_option("--url", o.url, "Instead, one configuration against a running server (http://host:port)");
  // The link rate (not negative), the request rate (positive), the parallel sequences and the
  // fetch threads (1..64) are checked by the benchmark and the servers it starts; the ranges
  // below by nothing else.
  bench_serve->add_option("--link-gbps", o.link_gbps, "The in-process servers' fetch link cap (0: none)")
      ->capture_default_str();
  bench_serve->add_option("--rate", o.rate, "Requests per second (Poisson arrivals)")->capture_default_str();
  bench_serve->add_option("--requests", o.requests, "Requests per configuration")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  bench_serve->add_option("--shared-fraction", o.shared_fraction, "Fraction of requests sharing a long prefix")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  bench_serve->add_option("--prefixes", o.prefixes, "Distinct shared documents")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  bench_serve->add_option("--prefix-tokens", o.prefix_tokens, "Tokens per shared document")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--suffix-tokens", o.suffix_tokens, "Each shared-prefix request's own tokens after it")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--unique-tokens", o.unique_tokens, "No-prefix prompt length (0.8x to 1.2x this)")
      ->capture_default_str()
      ->check(CLI::Range(5u, 1u << 20));
  bench_serve->add_option("--max-tokens", o.max_tokens, "Completion tokens per request")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--parallel", o.parallel, "The servers' requests decoded together")->capture_default_str();
  bench_serve
      ->add_option("--fetch-threads", o.fetch_threads, "The servers' pool workers for decoding and encoding chunks")
      ->capture_default_str();
  bench_serve->add_option("--threads", o.threads, "Threads for llama.cpp (0: the cores the fetch threads leave)");
  bench_serve->add_option("--seed", o.seed, "Seed of the trace (arrivals, classes, prompts)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  bench_serve->add_flag("--plan-recompute", o.plan_recompute,
                        "Let the servers' planner recompute chunks it predicts faster to prefill than to fetch "
                        "(default: always fetch, so every configuration schedules the same fetches)");
  AddJsonFlag(bench_serve, &bs->json);
  AddQuietFlag(bench_serve, &bs->quiet);
  return {bench_serve, [bs] { return RunBenchServe(*bs); }};
}

}  // namespace kvcodec_cli
