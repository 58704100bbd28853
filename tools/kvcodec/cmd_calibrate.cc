// `kvcodec calibrate`: fit KVTC's PCA bases and bit allocations for a model.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "cmd_profile.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"
#include "kvcodec_tools.h"

namespace kvcodec_cli {
namespace {

struct CalibrateArgs {
  std::string model = DefaultModel(), text, token_file, out, grouping = "auto", quantizer = "auto";
  uint32_t group_size = 0, tokens = 0, window = 0, chunk = 256;
  bool no_profile = false;
  int threads = 0;
  bool json = false, quiet = false;
};

int RunCalibrate(const CalibrateArgs& a) {
  kvc_calibrate_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.out_path = a.out.empty() ? nullptr : a.out.c_str();
  p.grouping = a.grouping.c_str();
  p.quantizer = a.quantizer.c_str();
  p.token_path = a.token_file.empty() ? nullptr : a.token_file.c_str();
  p.group_size = a.group_size;
  p.max_tokens = a.tokens;
  p.window = a.window;
  p.chunk_tokens = a.chunk;
  p.n_threads = a.threads;
  p.progress = a.quiet ? 0 : 1;
  auto report = kvcodec::CalibrateJson(p);
  if (!report.ok()) return Fail(report.error());
  if (!a.no_profile) {
    // The new calibration makes the old profile's kvtc rungs stale: measure them all again.
    ProfileArgs pa;
    pa.model = a.model;
    pa.calibration = nlohmann::json::parse(report.value())["out"].get<std::string>();
    pa.threads = a.threads;
    pa.quiet = a.quiet;
    pa.json = false;
    if (a.json) {
      kvc_profile_params pp{};
      pp.model_path = pa.model.c_str();
      pp.calibration = pa.calibration.c_str();
      pp.n_threads = pa.threads;
      pp.progress = a.quiet ? 0 : 1;
      auto profiled = kvcodec::ProfileJson(pp);
      if (!profiled.ok()) return Fail(profiled.error());
    } else if (int rc = RunProfile(pa); rc != 0) {
      return rc;
    }
  }
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf(
      "wrote %s: quantizer %s, grouping %s, group size %u; windows of %u tokens, fitted on %u tokens, "
      "measured on %u held back (chunks of %u)\n",
      Printable(j["out"]).c_str(), Printable(j["quantizer"]).c_str(), Printable(j["grouping"]).c_str(),
      j["group_size"].get<unsigned>(), j["window"].get<unsigned>(), j["fit_tokens"].get<unsigned>(),
      j["heldout_tokens"].get<unsigned>(), j["chunk_tokens"].get<unsigned>());
  std::printf("  chose %s\n", Printable(j["choice"]).c_str());
  std::printf("  variance in the top 8 components: keys %.1f%%, values %.1f%%\n",
              100 * j["key_variance_top8"].get<double>(), 100 * j["value_variance_top8"].get<double>());
  std::printf("  %8s %12s %12s %10s %14s %14s\n", "ratio", "alloc b/val", "coded b/val", "coded x", "rel. MSE",
              "RWF bits/val");
  for (const auto& r : j["rungs"]) {
    std::printf("  %8g %12.3f %12.3f %10.2f %14.5f %14.3f\n", r["target_ratio"].get<double>(),
                r["allocated_bits_per_value"].get<double>(), r["coded_bits_per_value"].get<double>(),
                r["coded_ratio"].get<double>(), r["heldout_rel_mse"].get<double>(),
                r["rwf_bits_per_value"].get<double>());
  }
  return 0;
}

}  // namespace

Command AddCalibrateCommand(CLI::App* parent) {
  auto ca = std::make_shared<CalibrateArgs>();
  auto* calibrate = parent->add_subcommand("calibrate", "Fit KVTC's PCA bases and bit allocations for a model");
  AddModelOption(calibrate, &ca->model);
  calibrate->add_option("--text", ca->text, "Calibration text (default: calib.txt beside the model)");
  calibrate->add_option("--out", ca->out, "Output .kvcal (default: <model>.kvcal)");
  calibrate->add_option("--tokens", ca->tokens, "Use at most this many tokens of the text (0: all)");
  calibrate
      ->add_option("--token-file", ca->token_file,
                   "Pre-tokenised calibration text: one document per line of space-separated token ids (the input "
                   "for a model without a tokenizer)")
      ->excludes("--text");
  calibrate->add_option("--group", ca->grouping, "Features sharing a basis (auto: the better of layer and layer-head)")
      ->check(CLI::IsMember({"auto", "layer", "layer-head", "all"}))
      ->capture_default_str();
  calibrate->add_option("--quantizer", ca->quantizer, "How coefficients are quantised (auto: the better one, measured)")
      ->check(CLI::IsMember({"auto", "token-group", "component"}))
      ->capture_default_str();
  calibrate
      ->add_option("--group-size", ca->group_size,
                   "Token-group components sharing one scale (0: the best of 8, 16, 32)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  calibrate->add_option("--window", ca->window, "Tokens per prefill (0: min(1024, the model's training context))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  calibrate->add_option("--chunk", ca->chunk, "Tokens per chunk the coded sizes are measured at")
      ->capture_default_str()
      ->check(CLI::Range(16u, 1u << 20));
  AddThreadsOption(calibrate, &ca->threads);
  calibrate->add_flag("--json", ca->json, "Print the report as JSON");
  calibrate->add_flag("--no-profile", ca->no_profile,
                      "Do not measure the quality profile afterwards (`kvcodec profile`)");
  AddQuietFlag(calibrate, &ca->quiet);
  return {calibrate, [ca] { return RunCalibrate(*ca); }};
}

}  // namespace kvcodec_cli
