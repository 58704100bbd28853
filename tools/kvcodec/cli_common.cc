#include "cli_common.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/utf8.h"
#include "quality/token_file.h"

namespace kvcodec_cli {

int Fail(const std::string& message) {
  std::fprintf(stderr, "kvcodec: error: %s\n", Printable(message).c_str());
  return 1;
}

int Fail(const kvcodec::Error& error) { return Fail(error.message); }

int Fail(const kvc::Status& status) { return Fail(status.ToString()); }

std::string Printable(const std::string& text) { return kvc::PrintableOneLine(text); }

std::string Printable(const nlohmann::json& value) {
  return value.is_string() ? Printable(value.get_ref<const std::string&>()) : Printable(value.dump());
}

namespace {
// Relative, so that no path of the machine that built the binary is compiled into it: from a
// source checkout's root (where the scripts and the README's examples run) it is the test model.
constexpr const char* kCheckoutTestModel = "models/kvtiny/kvtiny.gguf";
}  // namespace

std::string DefaultModel() {
  const char* env = std::getenv("KVCODEC_MODEL");
  return env != nullptr && *env != '\0' ? env : kCheckoutTestModel;
}

std::string JoinParams(const std::vector<std::string>& params) {
  std::string joined;
  for (const auto& p : params) joined += (joined.empty() ? "" : ",") + p;
  return joined;
}

kvc::DType ParseCacheType(const std::string& s) {
  if (s == "f32") return kvc::DType::kF32;
  if (s == "bf16") return kvc::DType::kBF16;
  return kvc::DType::kF16;
}

kvc::Result<std::vector<int32_t>> ReadTokenIds(const std::string& path, uint32_t n_vocab) {
  auto docs = kvc::ReadTokenFile(path, n_vocab);
  if (!docs.ok()) return docs.status();
  std::vector<int32_t> ids;
  for (const auto& d : *docs) ids.insert(ids.end(), d.begin(), d.end());
  return ids;
}

std::string FormatGbps(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g Gbps", gbps);
  return buf;
}

void AddModelOption(CLI::App* app, std::string* model) {
  app->add_option("-m,--model", *model, "GGUF model")->capture_default_str();
  // Outside a checkout the default names nothing: say so before the command starts, rather than
  // "model file not found" for a path the user never gave.
  app->callback([model] {
    std::error_code ec;
    if (*model == kCheckoutTestModel && !std::filesystem::exists(*model, ec)) {
      throw CLI::ValidationError("--model", "no model given: pass --model FILE or set KVCODEC_MODEL (the default, " +
                                                std::string(kCheckoutTestModel) +
                                                ", is the test model of a source checkout, run from its root)");
    }
  });
}

void AddThreadsOption(CLI::App* app, int* threads) {
  app->add_option("--threads", *threads, "Threads for llama.cpp (0: all cores)");
}

void AddJsonFlag(CLI::App* app, bool* json) { app->add_flag("--json", *json, "Print JSON"); }

void AddQuietFlag(CLI::App* app, bool* quiet) { app->add_flag("--quiet", *quiet, "No progress line"); }

void AddCalibrationOption(CLI::App* app, std::string* path) {
  app->add_option("--calibration", *path, "KVTC calibration (default: <model>.kvcal if present)");
}

void AddParamOption(CLI::App* app, std::vector<std::string>* params) {
  app->add_option("--param", *params, "Codec parameter key=value (repeatable)");
}

void AddCacheTypeOption(CLI::App* app, std::string* type) {
  app->add_option("--cache-type", *type, "llama.cpp KV cache type")
      ->check(CLI::IsMember({"f16", "f32", "bf16"}))
      ->capture_default_str();
}

void AddQualityLimitOptions(CLI::App* app, double* max_ppl_delta, double* min_top1) {
  // The C API reads a limit of 0 as "the default", so 0 is refused here rather than changed.
  auto above_zero = [](double most) {
    return CLI::Validator(
        [most](std::string& in) -> std::string {
          char* end = nullptr;
          const double v = std::strtod(in.c_str(), &end);
          if (end == in.c_str() || *end != '\0' || !(v > 0) || v > most) {
            return "must be a number above 0" + (most < 1e9 ? " and at most " + CLI::detail::to_string(most) : "");
          }
          return "";
        },
        most < 1e9 ? "(0, " + CLI::detail::to_string(most) + "]" : "> 0");
  };
  app->add_option("--max-ppl-delta", *max_ppl_delta, "Largest profiled perplexity change a rung may have, percent")
      ->capture_default_str()
      ->check(above_zero(1e9));
  app->add_option("--min-top1", *min_top1, "Smallest profiled top-1 agreement a rung may have")
      ->capture_default_str()
      ->check(above_zero(1.0));
}

void AddQualityOptions(CLI::App* app, std::string* profile, kvc::QualityLimits* limits) {
  app->add_option("--profile", *profile,
                  "Quality profile (default: <model>.kvprof.json beside the model; without one only raw fp16, "
                  "lossless, is stored and fetched)");
  app->add_option("--max-ppl-delta", limits->max_ppl_delta,
                  "Largest profiled perplexity change a rung may have, percent")
      ->capture_default_str();
  app->add_option("--min-top1", limits->min_top1, "Smallest profiled top-1 agreement a rung may have")
      ->capture_default_str();
}

}  // namespace kvcodec_cli
