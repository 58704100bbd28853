// `kvcodec codecs`: list codecs, their levels and parameters (with --model: the model's quality profile and floor).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"

namespace kvcodec_cli {
namespace {

struct CodecsArgs {
  std::string model, profile, calibration;
  double max_ppl_delta = 1.0, min_top1 = 0.97;
  bool json = false;
};

std::string FormatRatio(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", ratio);
  return buf;
}

// The model's quality profile and the floor it gives: what run, serve and bench ttft may use,
// with the evidence for each rung (positions scored, the figures and their bounds).
int RunModelFloor(const CodecsArgs& a) {
  auto floor = kvcodec::QualityFloorJson(a.model, a.profile, a.calibration, a.max_ppl_delta, a.min_top1);
  if (!floor.ok()) return Fail(floor.error());
  if (a.json) {
    std::cout << floor.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(floor.value());
  std::printf("%s: %s\n", Printable(a.model).c_str(), Printable(j["note"]).c_str());
  std::set<std::string> allowed;
  for (const auto& r : j["allowed"]) allowed.insert(r.get<std::string>());
  if (!j["profile"].is_null()) {
    const auto& p = j["profile"];
    // The profile's text is the file's to say (any UTF-8): shown as one printable line.
    const auto& lengths = p["prefix_lengths"];
    std::printf(
        "profile: %u documents from %s, each scored after %zu restored prefixes of %u to %u tokens; bounds at %g%% "
        "confidence (bootstrap over documents, %u resamples)\n",
        p["docs"].get<unsigned>(), Printable(p["text"]).c_str(), lengths.size(), lengths.front().get<unsigned>(),
        lengths.back().get<unsigned>(), 100 * p["confidence"].get<double>(), p["resamples"].get<unsigned>());
    std::printf("  %-9s %-9s %7s  %-9s %9s %21s %17s %21s  %s\n", "codec", "level", "ratio", "window", "positions",
                "ppl delta (bound)", "top-1 (bound)", "KL (bound)", "");
    for (const auto& r : p["rungs"]) {
      const std::string name = r["codec"].get<std::string>() + "/" + r["level"].get<std::string>();
      bool first = true;
      for (const auto& w : r["windows"]) {
        const std::string window = "first " + std::to_string(w["tokens"].get<unsigned>());
        std::printf(
            "  %-9s %-9s %7s  %-9s %9u %+9.3f%% (%+8.3f%%) %7.4f (%7.4f) %9.6f (%9.6f)  %s\n",
            first ? Printable(r["codec"]).c_str() : "", first ? Printable(r["level"]).c_str() : "",
            first ? FormatRatio(r["ratio"].get<double>()).c_str() : "", window.c_str(), w["positions"].get<unsigned>(),
            w["ppl_delta_pct"].get<double>(), w["ppl_delta_pct_bound"].get<double>(), w["top1_agreement"].get<double>(),
            w["top1_agreement_bound"].get<double>(), w["kl_mean"].get<double>(), w["kl_mean_bound"].get<double>(),
            first ? (allowed.count(name) ? "allowed" : "over the floor") : "");
        first = false;
      }
    }
  } else {
    std::string list;
    for (const auto& r : allowed) list += (list.empty() ? "" : ", ") + r;
    std::printf("allowed: %s\n", Printable(list).c_str());
  }
  return 0;
}

int RunCodecs(const CodecsArgs& a) {
  if (!a.model.empty()) return RunModelFloor(a);
  const bool json = a.json;
  auto codecs = kvcodec::CodecsJson();
  if (!codecs.ok()) return Fail(codecs.error());
  if (json) {
    std::cout << codecs.value() << "\n";
    return 0;
  }
  for (const auto& c : nlohmann::json::parse(codecs.value())) {
    std::string levels;
    for (const auto& l : c["levels"]) levels += (levels.empty() ? "" : ", ") + l.get<std::string>();
    std::string params;
    for (const auto& p : c["params"]) params += (params.empty() ? "" : ", ") + p.get<std::string>();
    std::printf("%-10s levels: %s (default %s)%s%s\n           %s\n", Printable(c["name"]).c_str(),
                Printable(levels).c_str(), Printable(c["default_level"]).c_str(),
                params.empty() ? "" : "; params: ", Printable(params).c_str(), Printable(c["description"]).c_str());
  }
  return 0;
}

}  // namespace

Command AddCodecsCommand(CLI::App* parent) {
  auto cs = std::make_shared<CodecsArgs>();
  auto* codecs = parent->add_subcommand(
      "codecs", "List codecs, their levels and parameters (with --model: the model's quality profile and floor)");
  AddJsonFlag(codecs, &cs->json);
  codecs->add_option("--model", cs->model, "Show this model's quality profile and which rungs are within the floor");
  codecs->add_option("--profile", cs->profile, "Quality profile (default: <model>.kvprof.json beside the model)");
  AddCalibrationOption(codecs, &cs->calibration);
  AddQualityLimitOptions(codecs, &cs->max_ppl_delta, &cs->min_top1);
  return {codecs, [cs] { return RunCodecs(*cs); }};
}

}  // namespace kvcodec_cli
