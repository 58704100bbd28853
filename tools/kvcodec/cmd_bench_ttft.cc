// `kvcodec bench ttft`: TTFT of a long prompt reusing its stored prefix, per codec and link rate, beside recompute;
// plus a labelled projection to 7B-70B shapes.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/comma_list.h"
#include "bench/ttft_bench.h"
#include "cli_common.h"
#include "cli_lists.h"
#include "commands.h"

namespace kvcodec_cli {
namespace {

struct BenchTtftArgs {
  kvc::TtftBenchOptions o;  // bound to the options; the lists and progress set from theirs
  std::string codecs, link_gbps, prefix_tokens;
  bool json = false, quiet = false;
  BenchTtftArgs() { o.model_path = DefaultModel(); }
};

int RunBenchTtft(BenchTtftArgs& a) {
  kvc::TtftBenchOptions& o = a.o;
  // The lists' syntax is checked here; their values (codecs that exist, rates above 0, prefixes
  // of whole chunks) and the fetch threads' range by RunTtftBenchJson.
  o.codecs = kvc::SplitCommaList(a.codecs);
  if (!a.link_gbps.empty()) {
    auto rates = ParseLinkRates(a.link_gbps);
    if (!rates.ok()) return Fail(rates.status());
    o.link_gbps = std::move(rates).value();
  }
  auto prefixes = ParsePrefixLengths(a.prefix_tokens);
  if (!prefixes.ok()) return Fail(prefixes.status());
  o.prefix_tokens = std::move(prefixes).value();
  o.progress = !a.quiet;
  auto report = kvc::RunTtftBenchJson(o);
  if (!report.ok()) return Fail(report.status());
  if (a.json) {
    std::cout << *report << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(*report);
  for (const auto& pj : j["prefixes"]) {
    std::printf("prefix %u tokens stored, %u-token prompt: recompute %.3f s\n", pj["prefix_tokens"].get<unsigned>(),
                pj["prompt_tokens"].get<unsigned>(), pj["recompute_ttft_s"].get<double>());
  }
  std::printf("  %7s %-9s %8s %9s %9s %9s %9s %9s %9s %7s %9s\n", "prefix", "codec", "Gbps", "TTFT s", "fetch",
              "decode", "restore", "prefill", "bound", "/bound", "peak MB");
  for (const auto& r : j["rows"]) {
    std::printf("  %7u %-9s %8g %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %7.3f %9.1f\n", r["prefix_tokens"].get<unsigned>(),
                Printable(r["codec"]).c_str(), r["link_gbps"].get<double>(), r["ttft_s"].get<double>(),
                r["fetch_s"].get<double>(), r["decode_s"].get<double>(), r["restore_s"].get<double>(),
                r["prefill_s"].get<double>(), r["bound_s"].get<double>(), r["ttft_over_bound"].get<double>(),
                r["peak_rss_bytes"].get<double>() / 1e6);
  }
  std::printf("  (%s: see --json)\n", Printable(j["projection"]["label"]).c_str());
  return 0;
}

}  // namespace

Command AddBenchTtftCommand(CLI::App* parent) {
  auto bt = std::make_shared<BenchTtftArgs>();
  kvc::TtftBenchOptions& o = bt->o;
  auto* bench_ttft = parent->add_subcommand(
      "ttft",
      "TTFT of a long prompt reusing its stored prefix, per codec and link rate, beside recompute; "
      "plus a labelled projection to 7B-70B shapes");
  AddModelOption(bench_ttft, &o.model_path);
  bench_ttft->add_option("--text", o.text_path, "Text the prompt is taken from (default: eval.txt beside the model)");
  AddCalibrationOption(bench_ttft, &o.calibration);
  AddQualityOptions(bench_ttft, &o.profile, &o.quality);
  bench_ttft->add_option("--codecs", bt->codecs, "Codecs, comma-separated (default: every codec)");
  bench_ttft->add_option("--link-gbps", bt->link_gbps,
                         "Link rates, comma-separated (default: 0.01,0.03,0.1,0.3,1,3,10)");
  bench_ttft->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length (without --prefix-tokens)")
      ->capture_default_str();
  bench_ttft->add_option("--prefix-tokens", bt->prefix_tokens,
                         "Stored prefix lengths, comma-separated whole chunks, each followed by one chunk to prefill "
                         "(e.g. 1024,4096,16384,32768; the text repeats when shorter)");
  bench_ttft->add_option("--fetch-threads", o.fetch_threads, "Workers chunks decode on (0: one per core)");
  bench_ttft->add_option("--chunk", o.chunk_tokens, "Tokens per chunk")->capture_default_str();
  bench_ttft->add_option("--repeats", o.repeats, "Runs per point (median reported)")->capture_default_str();
  AddThreadsOption(bench_ttft, &o.threads);
  AddJsonFlag(bench_ttft, &bt->json);
  AddQuietFlag(bench_ttft, &bt->quiet);
  return {bench_ttft, [bt] { return RunBenchTtft(*bt); }};
}

}  // namespace kvcodec_cli
