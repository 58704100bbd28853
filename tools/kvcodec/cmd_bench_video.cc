// `kvcodec bench video`: the video codec's layout ablation: 8-bit codes, general-purpose coders, each layout step x
// coder.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/video_ablation.h"
#include "cli_common.h"
#include "commands.h"

namespace kvcodec_cli {
namespace {

struct BenchVideoArgs {
  kvc::VideoAblationOptions o;  // bound to the options; progress set from `quiet`
  bool json = false, quiet = false;
  BenchVideoArgs() { o.model_path = DefaultModel(); }
};

int RunBenchVideo(BenchVideoArgs& a) {
  a.o.progress = !a.quiet;
  auto report = kvc::RunVideoAblationJson(a.o);
  if (!report.ok()) return Fail(report.status());
  if (a.json) {
    std::cout << *report << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(*report);
  std::printf("video ablation: %u chunks of %u tokens; quant 8-bit ratio %.3fx\n", j["n_chunks"].get<unsigned>(),
              j["chunk"].get<unsigned>(), j["quant8_ratio"].get<double>());
  std::printf("  %-56s %-10s %8s %12s\n", "step", "coder", "ratio", "decode MB/s");
  for (const auto& s : j["steps"]) {
    std::printf("  %-56s %-10s %8.3f %12.1f\n", Printable(s["step"]).c_str(), Printable(s["coder"]).c_str(),
                s["compression_ratio"].get<double>(), s["decode_mb_s"].get<double>());
  }
  std::printf("  neighbouring-token difference variance / variance (2 = independent tokens):\n");
  for (const auto& l : j["neighbour_difference_ratio"]) {
    std::printf("    layer %2u  K %.3f  K (RoPE undone) %.3f  K (token order) %.3f  V %.3f  V (token order) %.3f\n",
                l["layer"].get<unsigned>(), l["k"].get<double>(), l["k_rope_undone"].get<double>(),
                l["k_token_ordered"].get<double>(), l["v"].get<double>(), l["v_token_ordered"].get<double>());
  }
  return 0;
}

}  // namespace

Command AddBenchVideoCommand(CLI::App* parent) {
  auto bv = std::make_shared<BenchVideoArgs>();
  kvc::VideoAblationOptions& o = bv->o;
  auto* bench_video = parent->add_subcommand(
      "video", "The video codec's layout ablation: 8-bit codes, general-purpose coders, each layout step x coder");
  AddModelOption(bench_video, &o.model_path);
  bench_video->add_option("--text", o.text_path, "Text to prefill (default: eval.txt beside the model)");
  bench_video->add_option("--ctx", o.ctx, "Tokens prefilled")->capture_default_str();
  bench_video->add_option("--chunk", o.chunk, "Tokens per encoded chunk")->capture_default_str();
  bench_video->add_option("--preset", o.preset, "x265/x264 preset")->capture_default_str();
  bench_video->add_option("--min-seconds", o.min_seconds, "Time per decode measurement")->capture_default_str();
  AddJsonFlag(bench_video, &bv->json);
  AddQuietFlag(bench_video, &bv->quiet);
  return {bench_video, [bv] { return RunBenchVideo(*bv); }};
}

}  // namespace kvcodec_cli
