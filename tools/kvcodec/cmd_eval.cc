// `kvcodec eval`: measure a codec's accuracy on a real model (compress, restore, compare).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cli_lists.h"
#include "commands.h"
#include "quality/evaluator.h"

namespace kvcodec_cli {
namespace {

struct EvalArgs {
  kvc::EvalOptions o;  // bound to the options; the cache type, parameters and progress set from theirs
  std::string cache_type = "f16";
  std::vector<std::string> params;
  bool json = false, quiet = false;
  EvalArgs() { o.model_path = DefaultModel(); }
};

int RunEval(EvalArgs& a) {
  kvc::EvalOptions& o = a.o;
  auto params = ParseCodecParams(a.params);
  if (!params.ok()) return Fail(params.status());
  o.encode.params = std::move(params).value();
  o.session.cache_type = ParseCacheType(a.cache_type);
  o.progress = !a.quiet;
  auto report = kvc::RunEval(o);
  if (!report.ok()) return Fail(report.status());
  const kvc::EvalReport& r = *report;
  if (a.json) {
    std::cout << kvc::EvalReportJson(r) << "\n";
    return 0;
  }
  std::printf("codec %s level %s: %u docs, ctx %u, cont %u\n", Printable(r.codec).c_str(), Printable(r.level).c_str(),
              o.n_docs, o.ctx, o.cont);
  std::printf("  compression ratio  %.2fx  (%llu fp16 bytes -> %llu stored)\n", r.compression_ratio,
              static_cast<unsigned long long>(r.bytes_fp16), static_cast<unsigned long long>(r.bytes_stored));
  std::printf("  perplexity         %.4f -> %.4f  (%+.3f%%)\n", r.ppl_base, r.ppl_codec, r.ppl_delta_pct);
  std::printf("  top-1 agreement    %.4f\n", r.top1_agreement);
  std::printf("  mean KL            %.6f\n", r.kl_mean);
  std::printf("  encode / decode    %.1f / %.1f MB/s\n", r.encode_mb_s, r.decode_mb_s);
  return 0;
}

}  // namespace

Command AddEvalCommand(CLI::App* parent) {
  auto ev = std::make_shared<EvalArgs>();
  kvc::EvalOptions& o = ev->o;
  auto* eval =
      parent->add_subcommand("eval", "Measure a codec's accuracy on a real model (compress, restore, compare)");
  AddModelOption(eval, &o.model_path);
  eval->add_option("--codec", o.codec, "Codec (see `kvcodec codecs`)")->capture_default_str();
  eval->add_option("--level", o.encode.level, "Codec level (default: the codec's default)");
  AddParamOption(eval, &ev->params);
  eval->add_option("--docs", o.n_docs, "Documents to evaluate")->capture_default_str()->check(CLI::Range(1u, 100000u));
  eval->add_option("--ctx", o.ctx, "Context tokens whose KV is compressed")
      ->capture_default_str()
      ->check(CLI::Range(2u, 1u << 20));
  // Its range (1..4096) is kvc::RunEval's to check.
  eval->add_option("--cont", o.cont, "Continuation tokens scored")->capture_default_str();
  eval->add_option("--text", o.text_path,
                   "Evaluation text (default: eval.txt beside the model; each document starts with the model's BOS, "
                   "if it has one)");
  eval->add_option("--token-file", o.token_path,
                   "Pre-tokenised documents: one per line of space-separated token ids (the model's BOS added when "
                   "missing, if it has one); the first --docs lines of at least ctx + cont + 1 tokens are used; "
                   "the input for a model without a tokenizer")
      ->excludes("--text");
  AddCacheTypeOption(eval, &ev->cache_type);
  AddThreadsOption(eval, &o.session.n_threads);
  AddCalibrationOption(eval, &o.calibration);
  eval->add_flag("--json", ev->json, "Print the report as JSON");
  AddQuietFlag(eval, &ev->quiet);
  return {eval, [ev] { return RunEval(*ev); }};
}

}  // namespace kvcodec_cli
