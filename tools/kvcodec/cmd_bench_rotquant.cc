// `kvcodec bench rotquant`: rotquant's optional parts measured on a real model's KV, per bit width.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/rotquant_ablation.h"
#include "cli_common.h"
#include "commands.h"

namespace kvcodec_cli {
namespace {

struct BenchRotQuantArgs {
  kvc::RotQuantAblationOptions o;  // bound to the options; progress set from `quiet`
  bool json = false, quiet = false;
  BenchRotQuantArgs() { o.model_path = DefaultModel(); }
};

int RunBenchRotQuant(BenchRotQuantArgs& a) {
  a.o.progress = !a.quiet;
  auto report = kvc::RunRotQuantAblationJson(a.o);
  if (!report.ok()) return Fail(report.status());
  if (a.json) {
    std::cout << *report << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(*report);
  std::printf("rotquant ablation: %u chunks of %u tokens, head_dim %u (relative squared error K / V)\n",
              j["n_chunks"].get<unsigned>(), j["chunk"].get<unsigned>(), j["head_dim"].get<unsigned>());
  auto row = [](const char* name, const nlohmann::json& r) {
    std::printf("    %-28s %6.3f bits  K %.5f  V %.5f\n", name, r["bits_per_value"].get<double>(),
                r["rel_err_k"].get<double>(), r["rel_err_v"].get<double>());
  };
  for (const auto& l : j["levels"]) {
    std::printf("  %u bits\n", l["bits"].get<unsigned>());
    row("plain", l["plain"]);
    row("+ residual sign bit", l["sign_refined"]);
    if (l.contains("qjl")) row("1 bit less + QJL sketch", l["qjl"]);
    std::printf("    %-28s K %.5f\n", "keys with RoPE undone", l["keys_rope_undone"]["rel_err_k"].get<double>());
    const auto& e = l["entropy_coded"];
    std::printf("    %-28s %6.3f bits (codes' entropy %.3f)  decode %.0f MB/s, plain %.0f MB/s\n",
                "entropy-coded (rANS)", e["bits_per_value"].get<double>(), e["code_entropy_bits"].get<double>(),
                e["decode_mb_s"].get<double>(), l["plain"]["decode_mb_s"].get<double>());
  }
  return 0;
}

}  // namespace

Command AddBenchRotQuantCommand(CLI::App* parent) {
  auto br = std::make_shared<BenchRotQuantArgs>();
  kvc::RotQuantAblationOptions& o = br->o;
  auto* bench_rotquant = parent->add_subcommand(
      "rotquant",
      "rotquant's optional parts on a real KV cache: entropy coding, a residual sign bit, a QJL residual sketch, "
      "RoPE undone");
  AddModelOption(bench_rotquant, &o.model_path);
  bench_rotquant->add_option("--text", o.text_path, "Text to prefill (default: eval.txt beside the model)");
  bench_rotquant->add_option("--ctx", o.ctx, "Tokens prefilled")->capture_default_str();
  bench_rotquant->add_option("--chunk", o.chunk, "Tokens per coded chunk")->capture_default_str();
  bench_rotquant->add_option("--min-seconds", o.min_seconds, "Time per decode measurement")->capture_default_str();
  AddJsonFlag(bench_rotquant, &br->json);
  AddQuietFlag(bench_rotquant, &br->quiet);
  return {bench_rotquant, [br] { return RunBenchRotQuant(*br); }};
}

}  // namespace kvcodec_cli
