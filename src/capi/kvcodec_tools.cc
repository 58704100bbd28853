// The command line's extra entry points (kvcodec_tools.h) over the bench module.
#include "kvcodec_tools.h"

#include <string>

#include "bench/codec_bench.h"
#include "bench/rotquant_ablation.h"
#include "bench/serve_bench.h"
#include "bench/ttft_bench.h"
#include "bench/video_ablation.h"
#include "capi_support.h"
#include "llama/model_files.h"
#include "quality/calibrate.h"
#include "quality/evaluator.h"
#include "quality/profile_measure.h"
#include "quality/token_file.h"
#include "transform_coding/kvcal.h"

using namespace kvc::capi;  // NOLINT(google-build-using-namespace): the C API's conventions

namespace {

kvc::Result<std::string> EvalJsonReport(const kvc_eval_params* p) {
  if (!ValidDType(p->cache_type)) return kvc::InvalidArgument("invalid cache_type");
  kvc::EvalOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->codec) o.codec = p->codec;
  if (p->calibration) o.calibration = p->calibration;
  if (p->token_path) o.token_path = p->token_path;
  if (p->level) o.encode.level = p->level;
  ASSIGN_OR_RETURN(o.encode.params, ParseParams(p->codec_params));
  if (p->n_docs) o.n_docs = p->n_docs;
  if (p->ctx) o.ctx = p->ctx;
  if (p->cont) o.cont = p->cont;
  o.session.n_threads = p->n_threads;
  o.session.cache_type = static_cast<kvc::DType>(p->cache_type);
  o.progress = p->progress != 0;
  ASSIGN_OR_RETURN(const auto report, kvc::RunEval(o));
  return kvc::EvalReportJson(report);
}

kvc::Result<std::string> CalibrateJsonReport(const kvc_calibrate_params* p) {
  kvc::CalibrateOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->token_path) o.token_path = p->token_path;
  if (p->grouping && std::string_view(p->grouping) != "auto") {
    ASSIGN_OR_RETURN(o.grouping, kvc::ParseKvtcGrouping(p->grouping));
  }
  if (p->quantizer && std::string_view(p->quantizer) != "auto") {
    ASSIGN_OR_RETURN(o.quantizer, kvc::ParseKvtcQuantizer(p->quantizer));
  }
  o.group_size = p->group_size;
  if (p->chunk_tokens) o.chunk_tokens = p->chunk_tokens;
  o.max_tokens = p->max_tokens;
  o.window = p->window;
  o.session.n_threads = p->n_threads;
  o.progress = p->progress != 0;
  kvc::KvtcCalibration calibration;
  ASSIGN_OR_RETURN(const kvc::CalibrateReport report, kvc::RunCalibrate(o, &calibration));
  const std::string out =
      p->out_path ? p->out_path : std::filesystem::path(o.model_path).replace_extension(".kvcal").string();
  RETURN_IF_ERROR(kvc::SaveKvcal(calibration, out));
  auto json = kvc::ReportJson::parse(kvc::CalibrateReportJson(report));
  json["out"] = out;
  return kvc::DumpReport(json);
}

kvc::Result<std::string> ProfileJsonReport(const kvc_profile_params* p) {
  kvc::ProfileOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->calibration) o.calibration = p->calibration;
  o.docs = p->docs;
  o.ctx = p->ctx;
  o.cont = p->cont;
  o.session.n_threads = p->n_threads;
  o.progress = p->progress != 0;
  ASSIGN_OR_RETURN(const kvc::ModelProfile profile, kvc::MeasureProfile(o));
  const std::string out = p->out_path ? p->out_path : kvc::DefaultProfilePath(o.model_path);
  RETURN_IF_ERROR(kvc::SaveProfile(profile, out));
  auto json = kvc::ReportJson::parse(kvc::WriteProfile(profile));
  json["out"] = out;
  return kvc::DumpReport(json);
}

kvc::Result<std::string> BenchCodecJsonReport(const kvc_bench_codec_params* p) {
  kvc::CodecBenchOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->calibration) o.calibration = p->calibration;
  if (p->codec) o.codec = p->codec;
  if (p->level) o.encode.level = p->level;
  ASSIGN_OR_RETURN(o.encode.params, ParseParams(p->codec_params));
  if (p->ctx) o.ctx = p->ctx;
  if (p->chunk) o.chunk = p->chunk;
  o.threads = p->n_threads;
  if (p->min_seconds > 0) o.min_seconds = p->min_seconds;
  ASSIGN_OR_RETURN(const auto report, kvc::RunCodecBench(o));
  return kvc::CodecBenchReportJson(report);
}

kvc::Result<std::string> BenchTtftJsonReport(const kvc_bench_ttft_params* p) {
  kvc::TtftBenchOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->calibration) o.calibration = p->calibration;
  o.codecs = SplitList(p->codecs);
  if (p->link_gbps) {
    o.link_gbps.clear();
    for (const std::string& g : SplitList(p->link_gbps)) {
      char* end = nullptr;
      const double v = std::strtod(g.c_str(), &end);
      if (end == g.c_str() || *end != '\0' || !(v > 0)) {
        return kvc::InvalidArgument("link rate '" + g + "' is not a positive number of Gbps");
      }
      o.link_gbps.push_back(v);
    }
  }
  if (p->prompt_tokens) o.prompt_tokens = p->prompt_tokens;
  if (p->chunk_tokens) o.chunk_tokens = p->chunk_tokens;
  if (p->repeats) o.repeats = p->repeats;
  for (const std::string& t : SplitList(p->prefix_tokens)) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
    if (t.empty() || t[0] == '-' || end == t.c_str() || *end != '\0' || v == 0 || v > kvc::kMaxTokens) {
      return (kvc::InvalidArgument("prefix length '" + t + "' is not a number of tokens in 1.." +
                                   std::to_string(kvc::kMaxTokens)));
    }
    o.prefix_tokens.push_back(static_cast<uint32_t>(v));
  }
  if (p->n_fetch_threads < 0 || p->n_fetch_threads > 64) return kvc::InvalidArgument("fetch threads must be in 0..64");
  o.fetch_threads = p->n_fetch_threads;
  o.threads = p->n_threads;
  SetQuality(p, &o.profile, &o.quality);
  o.progress = p->quiet == 0;
  return kvc::RunTtftBenchJson(o);
}

kvc::Result<std::string> BenchVideoJsonReport(const kvc_bench_video_params* p) {
  kvc::VideoAblationOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->preset) o.preset = p->preset;
  if (p->ctx) o.ctx = p->ctx;
  if (p->chunk) o.chunk = p->chunk;
  if (p->min_seconds > 0) o.min_seconds = p->min_seconds;
  o.progress = p->quiet == 0;
  return kvc::RunVideoAblationJson(o);
}

kvc::Result<std::string> BenchRotQuantJsonReport(const kvc_bench_rotquant_params* p) {
  kvc::RotQuantAblationOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->ctx) o.ctx = p->ctx;
  if (p->chunk) o.chunk = p->chunk;
  if (p->min_seconds > 0) o.min_seconds = p->min_seconds;
  o.progress = p->quiet == 0;
  return kvc::RunRotQuantAblationJson(o);
}

kvc::Result<std::string> BenchServeJsonReport(const kvc_bench_serve_params* p) {
  kvc::ServeBenchOptions o;
  o.model_path = p->model_path;
  if (p->text_path) o.text_path = p->text_path;
  if (p->calibration) o.calibration = p->calibration;
  if (p->codec) o.codec = p->codec;
  if (p->configs) o.configs = SplitList(p->configs);
  if (p->url) o.url = p->url;
  if (p->link_gbps < 0 || p->rate < 0 || p->shared_fraction < 0 || p->shared_fraction > 1) {
    return kvc::InvalidArgument("link rate and request rate must not be negative, shared fraction in 0..1");
  }
  if (p->n_parallel < 0 || p->n_fetch_threads < 0)
    return kvc::InvalidArgument("parallel and fetch threads must not be negative");
  o.link_gbps = p->link_gbps;
  if (p->rate > 0) o.rate = p->rate;
  if (p->shared_fraction > 0) o.shared_fraction = p->shared_fraction;
  if (p->requests) o.requests = p->requests;
  if (p->prefixes) o.prefixes = p->prefixes;
  if (p->prefix_tokens) o.prefix_tokens = p->prefix_tokens;
  if (p->suffix_tokens) o.suffix_tokens = p->suffix_tokens;
  if (p->unique_tokens) o.unique_tokens = p->unique_tokens;
  if (p->max_tokens) o.max_tokens = p->max_tokens;
  if (p->n_parallel) o.parallel = p->n_parallel;
  if (p->n_fetch_threads) o.fetch_threads = p->n_fetch_threads;
  o.threads = p->n_threads;
  if (p->seed) o.seed = p->seed;
  o.plan_recompute = p->plan_recompute != 0;
  o.progress = p->quiet == 0;
  return kvc::RunServeBenchJson(o);
}

}  // namespace

extern "C" {

kvc_status kvc_eval_json(const kvc_eval_params* p, char** out_json) { return JsonTool(p, out_json, EvalJsonReport); }

kvc_status kvc_calibrate_json(const kvc_calibrate_params* p, char** out_json) {
  return JsonTool(p, out_json, CalibrateJsonReport);
}

kvc_status kvc_read_token_file(const char* path, uint32_t n_vocab, int32_t** out_tokens, size_t* out_n) {
  return Guard([&]() -> kvc_status {
    if (path == nullptr || out_tokens == nullptr || out_n == nullptr) return NullArgument("path or out");
    auto docs = kvc::ReadTokenFile(path, n_vocab);
    if (!docs.ok()) return Fail(docs.status());
    std::vector<int32_t> ids;
    for (const auto& d : *docs) ids.insert(ids.end(), d.begin(), d.end());
    *out_tokens = reinterpret_cast<int32_t*>(
        CopyBytes(std::span(reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t))));
    *out_n = ids.size();
    return KVC_OK;
  });
}

kvc_status kvc_profile_json(const kvc_profile_params* p, char** out_json) {
  return JsonTool(p, out_json, ProfileJsonReport);
}

kvc_status kvc_bench_codec_json(const kvc_bench_codec_params* p, char** out_json) {
  return JsonTool(p, out_json, BenchCodecJsonReport);
}

kvc_status kvc_bench_ttft_json(const kvc_bench_ttft_params* p, char** out_json) {
  return JsonTool(p, out_json, BenchTtftJsonReport);
}

kvc_status kvc_bench_video_json(const kvc_bench_video_params* p, char** out_json) {
  return JsonTool(p, out_json, BenchVideoJsonReport);
}

kvc_status kvc_bench_rotquant_json(const kvc_bench_rotquant_params* p, char** out_json) {
  return JsonTool(p, out_json, BenchRotQuantJsonReport);
}

kvc_status kvc_bench_serve_json(const kvc_bench_serve_params* p, char** out_json) {
  return JsonTool(p, out_json, BenchServeJsonReport);
}

}  // extern "C"
