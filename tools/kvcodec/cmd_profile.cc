// `kvcodec profile`: measure every rung of every codec on the model (held-back calibration text) and write its quality
// profile.

#include "cmd_profile.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "base/report_json.h"
#include "cli_common.h"
#include "commands.h"
#include "reuse/model_profile.h"

namespace kvcodec_cli {

int RunProfile(ProfileArgs& a, bool print) {
  a.o.progress = !a.quiet;
  auto profile = kvc::MeasureProfile(a.o);
  if (!profile.ok()) return Fail(profile.status());
  const std::string out = a.out.empty() ? kvc::DefaultProfilePath(a.o.model_path) : a.out;
  if (kvc::Status saved = kvc::SaveProfile(*profile, out); !saved.ok()) return Fail(saved);
  if (!print) return 0;
  if (a.json) {
    auto json = kvc::ReportJson::parse(kvc::WriteProfile(*profile));
    json["out"] = out;
    std::cout << kvc::DumpReport(json) << "\n";
    return 0;
  }
  std::printf("wrote %s: %zu rungs on %u documents of %u + %u tokens (see `kvcodec codecs --model %s`)\n",
              Printable(out).c_str(), profile->rungs.size(), profile->docs, profile->ctx, profile->cont,
              Printable(a.o.model_path).c_str());
  return 0;
}

Command AddProfileCommand(CLI::App* parent) {
  auto pa = std::make_shared<ProfileArgs>();
  kvc::ProfileOptions& o = pa->o;
  auto* profile = parent->add_subcommand(
      "profile",
      "Measure every rung of every codec on the model (held-back calibration text) and write its quality profile");
  AddModelOption(profile, &o.model_path);
  profile->add_option("--text", o.text_path, "Text (default: calib.txt beside the model; its last windows are used)");
  profile
      ->add_option("--token-file", o.token_path,
                   "Token ids instead of a text (the file calibrate read): its lines one after another, the last "
                   "windows used; the input for a model without a tokenizer")
      ->excludes("--text");
  AddCalibrationOption(profile, &o.calibration);
  profile->add_option("--out", pa->out, "Output (default: <model>.kvprof.json)");
  profile->add_option("--docs", o.docs, "Documents (0: enough for 1024 scored positions, at least 8)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 100000u));
  profile->add_option("--ctx", o.ctx, "Context tokens per document (0: min(1024, training context) - cont - 1)")
      ->capture_default_str();
  profile->add_option("--cont", o.cont, "Continuation tokens scored (0: min(128, training context / 4))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  AddThreadsOption(profile, &o.session.n_threads);
  profile->add_flag("--json", pa->json, "Print the profile as JSON");
  AddQuietFlag(profile, &pa->quiet);
  return {profile, [pa] { return RunProfile(*pa); }};
}

}  // namespace kvcodec_cli
