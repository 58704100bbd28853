// `kvcodec eval`: measure a codec's accuracy on a real model (compress, restore, compare).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "kvcodec/kvcodec.hpp"
#include "kvcodec_tools.h"

namespace kvcodec_cli {
namespace {

struct EvalArgs {
  std::string model = DefaultModel(), text, token_file, codec = "raw", level, cache_type = "f16", calibration;
  std::vector<std::string> params;
  uint32_t docs = 8, ctx = 1024, cont = 128;
  int threads = 0;
  bool json = false, quiet = false;
};

int RunEval(const EvalArgs& a) {
  kvc_eval_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.token_path = a.token_file.empty() ? nullptr : a.token_file.c_str();
  p.codec = a.codec.c_str();
  p.level = a.level.empty() ? nullptr : a.level.c_str();
  const std::string params = JoinParams(a.params);
  p.codec_params = params.empty() ? nullptr : params.c_str();
  p.n_docs = a.docs;
  p.ctx = a.ctx;
  p.cont = a.cont;
  p.n_threads = a.threads;
  p.cache_type = ParseCacheType(a.cache_type);
  p.progress = a.quiet ? 0 : 1;
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  auto report = kvcodec::EvalJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("codec %s level %s: %u docs, ctx %u, cont %u\n", Printable(j["codec"]).c_str(),
              Printable(j["level"]).c_str(), a.docs, a.ctx, a.cont);
  std::printf("  compression ratio  %.2fx  (%llu fp16 bytes -> %llu stored)\n", j["compression_ratio"].get<double>(),
              j["bytes_fp16"].get<unsigned long long>(), j["bytes_stored"].get<unsigned long long>());
  std::printf("  perplexity         %.4f -> %.4f  (%+.3f%%)\n", j["ppl_base"].get<double>(),
              j["ppl_codec"].get<double>(), j["ppl_delta_pct"].get<double>());
  std::printf("  top-1 agreement    %.4f\n", j["top1_agreement"].get<double>());
  std::printf("  mean KL            %.6f\n", j["kl_mean"].get<double>());
  std::printf("  encode / decode    %.1f / %.1f MB/s\n", j["encode_mb_s"].get<double>(),
              j["decode_mb_s"].get<double>());
  return 0;
}

}  // namespace

Command AddEvalCommand(CLI::App* parent) {
  auto ev = std::make_shared<EvalArgs>();
  auto* eval =
      parent->add_subcommand("eval", "Measure a codec's accuracy on a real model (compress, restore, compare)");
  AddModelOption(eval, &ev->model);
  eval->add_option("--codec", ev->codec, "Codec (see `kvcodec codecs`)")->capture_default_str();
  eval->add_option("--level", ev->level, "Codec level (default: the codec's default)");
  AddParamOption(eval, &ev->params);
  eval->add_option("--docs", ev->docs, "Documents to evaluate")->capture_default_str()->check(CLI::Range(1u, 100000u));
  eval->add_option("--ctx", ev->ctx, "Context tokens whose KV is compressed")
      ->capture_default_str()
      ->check(CLI::Range(2u, 1u << 20));
  eval->add_option("--cont", ev->cont, "Continuation tokens scored")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  eval->add_option("--text", ev->text,
                   "Evaluation text (default: eval.txt beside the model; each document starts with the model's BOS, "
                   "if it has one)");
  eval->add_option("--token-file", ev->token_file,
                   "Pre-tokenised documents: one per line of space-separated token ids (the model's BOS added when "
                   "missing, if it has one); the first --docs lines of at least ctx + cont + 1 tokens are used; "
                   "the input for a model without a tokenizer")
      ->excludes("--text");
  AddCacheTypeOption(eval, &ev->cache_type);
  AddThreadsOption(eval, &ev->threads);
  AddCalibrationOption(eval, &ev->calibration);
  eval->add_flag("--json", ev->json, "Print the report as JSON");
  AddQuietFlag(eval, &ev->quiet);
  return {eval, [ev] { return RunEval(*ev); }};
}

}  // namespace kvcodec_cli
