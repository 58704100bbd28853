// `kvcodec calibrate`: fit KVTC's PCA bases and bit allocations for a model.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "base/report_json.h"
#include "cli_common.h"
#include "cmd_profile.h"
#include "commands.h"
#include "quality/calibrate.h"
#include "transform_coding/calibration.h"
#include "transform_coding/kvcal.h"

namespace kvcodec_cli {
namespace {

struct CalibrateArgs {
  kvc::CalibrateOptions o;  // bound to the options; grouping, quantiser and progress set from theirs
  std::string out, grouping = "auto", quantizer = "auto";
  bool no_profile = false, json = false, quiet = false;
  CalibrateArgs() { o.model_path = DefaultModel(); }
};

void PrintCalibrateReport(const kvc::CalibrateReport& r, const std::string& out) {
  std::printf(
      "wrote %s: quantizer %s, grouping %s, group size %u; windows of %u tokens, fitted on %u tokens, "
      "measured on %u held back (chunks of %u)\n",
      Printable(out).c_str(), Printable(r.quantizer).c_str(), Printable(r.grouping).c_str(), r.group_size, r.window,
      r.fit_tokens, r.heldout_tokens, r.chunk_tokens);
  std::printf("  chose %s\n", Printable(r.choice).c_str());
  std::printf("  variance in the top 8 components: keys %.1f%%, values %.1f%%\n", 100 * r.key_variance_top8,
              100 * r.value_variance_top8);
  std::printf("  %8s %12s %12s %10s %14s %14s\n", "ratio", "alloc b/val", "coded b/val", "coded x", "rel. MSE",
              "RWF bits/val");
  for (const kvc::CalibrationRung& rung : r.rungs) {
    std::printf("  %8g %12.3f %12.3f %10.2f %14.5f %14.3f\n", static_cast<double>(rung.target_ratio),
                rung.allocated_bits_per_value, rung.coded_bits_per_value, rung.coded_ratio, rung.heldout_rel_mse,
                rung.rwf_bits_per_value);
  }
}

int RunCalibrate(CalibrateArgs& a) {
  kvc::CalibrateOptions& o = a.o;
  // "auto" leaves the choice to the measurement.
  if (a.grouping != "auto") {
    auto grouping = kvc::ParseKvtcGrouping(a.grouping);
    if (!grouping.ok()) return Fail(grouping.status());
    o.grouping = *grouping;
  }
  if (a.quantizer != "auto") {
    auto quantizer = kvc::ParseKvtcQuantizer(a.quantizer);
    if (!quantizer.ok()) return Fail(quantizer.status());
    o.quantizer = *quantizer;
  }
  o.progress = !a.quiet;
  o.hold_back_for_profile = !a.no_profile;
  kvc::KvtcCalibration calibration;
  auto report = kvc::RunCalibrate(o, &calibration);
  if (!report.ok()) return Fail(report.status());
  const std::string out =
      a.out.empty() ? std::filesystem::path(o.model_path).replace_extension(".kvcal").string() : a.out;
  if (kvc::Status saved = kvc::SaveKvcal(calibration, out); !saved.ok()) return Fail(saved);
  if (!a.no_profile) {
    // The new calibration makes the old profile's kvtc rungs stale: measure them all again.
    ProfileArgs pa;
    pa.o.model_path = o.model_path;
    pa.o.calibration = out;
    // Measured on what calibrate held back of its own input, never on a text it was not given.
    pa.o.text_path = o.text_path;
    pa.o.token_path = o.token_path;
    pa.o.max_tokens = o.max_tokens;
    pa.o.session.n_threads = o.session.n_threads;
    pa.quiet = a.quiet;
    // With --json the one report printed is the calibration's.
    if (int rc = RunProfile(pa, !a.json); rc != 0) return rc;
  }
  if (a.json) {
    auto json = kvc::ReportJson::parse(kvc::CalibrateReportJson(*report));
    json["out"] = out;
    std::cout << kvc::DumpReport(json) << "\n";
    return 0;
  }
  PrintCalibrateReport(*report, out);
  return 0;
}

}  // namespace

Command AddCalibrateCommand(CLI::App* parent) {
  auto ca = std::make_shared<CalibrateArgs>();
  kvc::CalibrateOptions& o = ca->o;
  auto* calibrate = parent->add_subcommand("calibrate", "Fit KVTC's PCA bases and bit allocations for a model");
  AddModelOption(calibrate, &o.model_path);
  calibrate->add_option("--text", o.text_path,
                        "Calibration text, like your prompts (this or --token-file is required; its last windows are "
                        "held back from the fit for the quality profile)");
  calibrate->add_option("--out", ca->out, "Output .kvcal (default: <model>.kvcal)");
  calibrate->add_option("--tokens", o.max_tokens, "Use at most this many tokens of the text (0: all)");
  calibrate
      ->add_option("--token-file", o.token_path,
                   "Pre-tokenised calibration text: one document per line of space-separated token ids (the input "
                   "for a model without a tokenizer)")
      ->excludes("--text");
  calibrate->add_option("--group", ca->grouping, "Features sharing a basis (auto: the better of layer and layer-head)")
      ->check(CLI::IsMember({"auto", "layer", "layer-head", "all"}))
      ->capture_default_str();
  calibrate->add_option("--quantizer", ca->quantizer, "How coefficients are quantised (auto: the better one, measured)")
      ->check(CLI::IsMember({"auto", "token-group", "component"}))
      ->capture_default_str();
  // Its range (0..4096) is kvc::RunCalibrate's to check.
  calibrate
      ->add_option("--group-size", o.group_size, "Token-group components sharing one scale (0: the best of 8, 16, 32)")
      ->capture_default_str();
  calibrate->add_option("--window", o.window, "Tokens per prefill (0: min(1024, the model's training context))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  calibrate->add_option("--chunk", o.chunk_tokens, "Tokens per chunk the coded sizes are measured at")
      ->capture_default_str()
      ->check(CLI::Range(16u, 1u << 20));
  AddThreadsOption(calibrate, &o.session.n_threads);
  calibrate->add_flag("--json", ca->json, "Print the report as JSON");
  calibrate->add_flag("--no-profile", ca->no_profile,
                      "Do not measure the quality profile afterwards (`kvcodec profile`), nor hold the text's end "
                      "back from the fit for it");
  AddQuietFlag(calibrate, &ca->quiet);
  return {calibrate, [ca] { return RunCalibrate(*ca); }};
}

}  // namespace kvcodec_cli
