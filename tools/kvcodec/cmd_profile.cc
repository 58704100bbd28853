// `kvcodec profile`: measure every rung of every codec on the model (held-back calibration text) and write its quality
// profile.

#include "cmd_profile.h"

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

int RunProfile(const ProfileArgs& a) {
  kvc_profile_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.out_path = a.out.empty() ? nullptr : a.out.c_str();
  p.docs = a.docs;
  p.ctx = a.ctx;
  p.cont = a.cont;
  p.n_threads = a.threads;
  p.progress = a.quiet ? 0 : 1;
  auto report = kvcodec::ProfileJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("wrote %s: %zu rungs on %u documents of %u + %u tokens (see `kvcodec codecs --model %s`)\n",
              Printable(j["out"]).c_str(), j["rungs"].size(), j["docs"].get<unsigned>(), j["ctx"].get<unsigned>(),
              j["cont"].get<unsigned>(), Printable(a.model).c_str());
  return 0;
}

Command AddProfileCommand(CLI::App* parent) {
  auto pa = std::make_shared<ProfileArgs>();
  auto* profile = parent->add_subcommand(
      "profile",
      "Measure every rung of every codec on the model (held-back calibration text) and write its quality profile");
  AddModelOption(profile, &pa->model);
  profile->add_option("--text", pa->text, "Text (default: calib.txt beside the model; its last windows are used)");
  AddCalibrationOption(profile, &pa->calibration);
  profile->add_option("--out", pa->out, "Output (default: <model>.kvprof.json)");
  profile->add_option("--docs", pa->docs, "Documents (0: enough for 1024 scored positions, at least 8)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 100000u));
  profile->add_option("--ctx", pa->ctx, "Context tokens per document (0: min(1024, training context) - cont - 1)")
      ->capture_default_str();
  profile->add_option("--cont", pa->cont, "Continuation tokens scored (0: min(128, training context / 4))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  AddThreadsOption(profile, &pa->threads);
  profile->add_flag("--json", pa->json, "Print the profile as JSON");
  AddQuietFlag(profile, &pa->quiet);
  return {profile, [pa] { return RunProfile(*pa); }};
}

}  // namespace kvcodec_cli
