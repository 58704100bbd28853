// `kvcodec bench ttft`: tTFT of a long prompt reusing its stored prefix, per codec and link rate, beside recompute; .

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

struct BenchTtftArgs {
  std::string model = DefaultModel(), text, calibration, codecs, link_gbps, prefix_tokens;
  uint32_t prompt_tokens = 4096, chunk = 256, repeats = 3;
  int threads = 0, fetch_threads = 0;
  bool json = false, quiet = false;
  QualityArgs quality;
};

int RunBenchTtft(const BenchTtftArgs& a) {
  kvc_bench_ttft_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.codecs = a.codecs.empty() ? nullptr : a.codecs.c_str();
  p.link_gbps = a.link_gbps.empty() ? nullptr : a.link_gbps.c_str();
  p.prompt_tokens = a.prompt_tokens;
  p.chunk_tokens = a.chunk;
  p.repeats = a.repeats;
  a.quality.Set(&p);
  p.n_threads = a.threads;
  p.quiet = a.quiet ? 1 : 0;
  p.prefix_tokens = a.prefix_tokens.empty() ? nullptr : a.prefix_tokens.c_str();
  p.n_fetch_threads = a.fetch_threads;
  auto report = kvcodec::BenchTtftJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
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
  auto* bench_ttft = parent->add_subcommand(
      "ttft",
      "TTFT of a long prompt reusing its stored prefix, per codec and link rate, beside recompute; "
      "plus a labelled projection to 7B-70B shapes");
  AddModelOption(bench_ttft, &bt->model);
  bench_ttft->add_option("--text", bt->text, "Text the prompt is taken from (default: eval.txt beside the model)");
  AddCalibrationOption(bench_ttft, &bt->calibration);
  bt->quality.AddTo(bench_ttft);
  bench_ttft->add_option("--codecs", bt->codecs, "Codecs, comma-separated (default: every codec)");
  bench_ttft->add_option("--link-gbps", bt->link_gbps,
                         "Link rates, comma-separated (default: 0.01,0.03,0.1,0.3,1,3,10)");
  bench_ttft->add_option("--prompt-tokens", bt->prompt_tokens, "Prompt length (without --prefix-tokens)")
      ->capture_default_str();
  bench_ttft->add_option("--prefix-tokens", bt->prefix_tokens,
                         "Stored prefix lengths, comma-separated whole chunks, each followed by one chunk to prefill "
                         "(e.g. 1024,4096,16384,32768; the text repeats when shorter)");
  bench_ttft->add_option("--fetch-threads", bt->fetch_threads, "Workers chunks decode on (0: one per core)");
  bench_ttft->add_option("--chunk", bt->chunk, "Tokens per chunk")->capture_default_str();
  bench_ttft->add_option("--repeats", bt->repeats, "Runs per point (median reported)")->capture_default_str();
  AddThreadsOption(bench_ttft, &bt->threads);
  AddJsonFlag(bench_ttft, &bt->json);
  AddQuietFlag(bench_ttft, &bt->quiet);
  return {bench_ttft, [bt] { return RunBenchTtft(*bt); }};
}

}  // namespace kvcodec_cli
