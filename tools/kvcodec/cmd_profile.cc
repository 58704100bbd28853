// `kvcodec profile`: measure every rung of every codec on the model (the end of the text it is given,
// which calibrate held back) and write its quality profile.

#include "cmd_profile.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "base/report_json.h"
#include "cli_common.h"
#include "cli_lists.h"
#include "commands.h"
#include "reuse/model_profile.h"

namespace kvcodec_cli {

int RunProfile(ProfileArgs& a, bool print) {
  a.o.progress = !a.quiet;
  if (!a.prefix_lengths.empty()) {
    auto lengths = ParsePrefixLengths(a.prefix_lengths);
    if (!lengths.ok()) return Fail(lengths.status());
    a.o.prefix_lengths = *lengths;
  }
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
  const kvc::ModelProfile& p = *profile;
  std::printf(
      "wrote %s: %zu rungs on %u documents, each scored in the first %u and %u tokens after %zu restored prefixes "
      "of %u to %u tokens; bounds at %g%% confidence (see `kvcodec codecs --model %s`)\n",
      Printable(out).c_str(), p.rungs.size(), p.docs, p.windows.front(), p.windows.back(), p.prefix_lengths.size(),
      p.prefix_lengths.front(), p.prefix_lengths.back(), 100 * p.confidence, Printable(a.o.model_path).c_str());
  return 0;
}

Command AddProfileCommand(CLI::App* parent) {
  auto pa = std::make_shared<ProfileArgs>();
  kvc::ProfileOptions& o = pa->o;
  auto* profile = parent->add_subcommand(
      "profile",
      "Measure every rung of every codec on the model, in the first 8 and 32 tokens after restored prefixes, with "
      "95% bounds, and write its quality profile");
  AddModelOption(profile, &o.model_path);
  profile->add_option("--text", o.text_path,
                      "Text like your prompts (this or --token-file is required); its last windows are the documents "
                      "(calibrate held them back)");
  profile
      ->add_option("--token-file", o.token_path,
                   "Token ids instead of a text (the file calibrate read): its lines one after another, the last "
                   "windows used; the input for a model without a tokenizer")
      ->excludes("--text");
  profile->add_option("--tokens", o.max_tokens, "Use at most this many tokens of the source, as calibrate did (0: all)")
      ->capture_default_str();
  AddCalibrationOption(profile, &o.calibration);
  profile->add_option("--out", pa->out, "Output (default: <model>.kvprof.json)");
  profile
      ->add_option("--docs", o.docs,
                   "Documents (0: enough for 2048 scored positions in the first 8 tokens after the prefixes)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 100000u));
  profile->add_option("--window", o.window, "Tokens per document (0: min(1024, the model's training context))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  profile->add_option("--prefix-lengths", pa->prefix_lengths,
                      "Restored prefix lengths, comma-separated, ascending (default: up to 16 evenly spaced up to the "
                      "window less 33)");
  profile->add_option("--resamples", o.resamples, "Bootstrap resamples of the documents for the bounds")
      ->capture_default_str();
  profile->add_option("--confidence", o.confidence, "Confidence of each one-sided bound")->capture_default_str();
  AddThreadsOption(profile, &o.session.n_threads);
  profile->add_flag("--json", pa->json, "Print the profile as JSON");
  AddQuietFlag(profile, &pa->quiet);
  return {profile, [pa] { return RunProfile(*pa); }};
}

}  // namespace kvcodec_cli
