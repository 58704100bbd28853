// The command line's extra entry points (kvcodec_tools.h) over the bench module.
#include "kvcodec_tools.h"

#include <string>

#include "bench/calibrate.h"
#include "bench/codec_bench.h"
#include "bench/evaluator.h"
#include "bench/profile_measure.h"
#include "bench/serve_bench.h"
#include "bench/ttft_bench.h"
#include "bench/video_ablation.h"
#include "capi_support.h"
#include "kvtc/kvcal.h"
#include "llama/model_files.h"

using namespace kvc::capi;  // NOLINT(google-build-using-namespace): the C API's conventions

extern "C" {

kvc_status kvc_eval_json(const kvc_eval_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    if (!ValidDType(p->cache_type)) return Fail(kvc::InvalidArgument("invalid cache_type"));
    kvc::EvalOptions o;
    o.model_path = p->model_path;
    if (p->text_path) o.text_path = p->text_path;
    if (p->codec) o.codec = p->codec;
    if (p->calibration) o.calibration = p->calibration;
    if (p->token_path) o.token_path = p->token_path;
    if (p->level) o.encode.level = p->level;
    auto params = ParseParams(p->codec_params);
    if (!params.ok()) return Fail(params.status());
    o.encode.params = std::move(params).value();
    if (p->n_docs) o.n_docs = p->n_docs;
    if (p->ctx) o.ctx = p->ctx;
    if (p->cont) o.cont = p->cont;
    o.session.n_threads = p->n_threads;
    o.session.cache_type = static_cast<kvc::DType>(p->cache_type);
    o.progress = p->progress != 0;
    auto report = kvc::RunEval(o);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(kvc::EvalReportJson(*report));
    return KVC_OK;
  });
}

kvc_status kvc_calibrate_json(const kvc_calibrate_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    kvc::CalibrateOptions o;
    o.model_path = p->model_path;
    if (p->text_path) o.text_path = p->text_path;
    if (p->token_path) o.token_path = p->token_path;
    if (p->grouping && std::string_view(p->grouping) != "auto") {
      auto grouping = kvc::ParseKvtcGrouping(p->grouping);
      if (!grouping.ok()) return Fail(grouping.status());
      o.grouping = *grouping;
    }
    if (p->quantizer && std::string_view(p->quantizer) != "auto") {
      auto quantizer = kvc::ParseKvtcQuantizer(p->quantizer);
      if (!quantizer.ok()) return Fail(quantizer.status());
      o.quantizer = *quantizer;
    }
    o.group_size = p->group_size;
    if (p->chunk_tokens) o.chunk_tokens = p->chunk_tokens;
    o.max_tokens = p->max_tokens;
    o.window = p->window;
    o.session.n_threads = p->n_threads;
    o.progress = p->progress != 0;
    kvc::KvtcCalibration calibration;
    auto report = kvc::RunCalibrate(o, &calibration);
    if (!report.ok()) return Fail(report.status());
    const std::string out =
        p->out_path ? p->out_path : std::filesystem::path(o.model_path).replace_extension(".kvcal").string();
    kvc::Status saved = kvc::SaveKvcal(calibration, out);
    if (!saved.ok()) return Fail(saved);
    auto json = nlohmann::ordered_json::parse(kvc::CalibrateReportJson(*report));
    json["out"] = out;
    *out_json = CopyString(DumpJson(json));
    return KVC_OK;
  });
}

kvc_status kvc_profile_json(const kvc_profile_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    kvc::ProfileOptions o;
    o.model_path = p->model_path;
    if (p->text_path) o.text_path = p->text_path;
    if (p->calibration) o.calibration = p->calibration;
    o.docs = p->docs;
    o.ctx = p->ctx;
    o.cont = p->cont;
    o.session.n_threads = p->n_threads;
    o.progress = p->progress != 0;
    auto profile = kvc::MeasureProfile(o);
    if (!profile.ok()) return Fail(profile.status());
    const std::string out = p->out_path ? p->out_path : kvc::DefaultProfilePath(o.model_path);
    kvc::Status saved = kvc::SaveProfile(*profile, out);
    if (!saved.ok()) return Fail(saved);
    auto json = nlohmann::ordered_json::parse(kvc::WriteProfile(*profile));
    json["out"] = out;
    *out_json = CopyString(DumpJson(json));
    return KVC_OK;
  });
}

kvc_status kvc_bench_codec_json(const kvc_bench_codec_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    kvc::CodecBenchOptions o;
    o.model_path = p->model_path;
    if (p->text_path) o.text_path = p->text_path;
    if (p->calibration) o.calibration = p->calibration;
    if (p->codec) o.codec = p->codec;
    if (p->level) o.encode.level = p->level;
    auto params = ParseParams(p->codec_params);
    if (!params.ok()) return Fail(params.status());
    o.encode.params = std::move(params).value();
    if (p->ctx) o.ctx = p->ctx;
    if (p->chunk) o.chunk = p->chunk;
    o.threads = p->n_threads;
    if (p->min_seconds > 0) o.min_seconds = p->min_seconds;
    auto report = kvc::RunCodecBench(o);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(kvc::CodecBenchReportJson(*report));
    return KVC_OK;
  });
}

kvc_status kvc_bench_ttft_json(const kvc_bench_ttft_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
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
          return Fail(kvc::InvalidArgument("link rate '" + g + "' is not a positive number of Gbps"));
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
        return Fail(kvc::InvalidArgument("prefix length '" + t + "' is not a number of tokens in 1.." +
                                         std::to_string(kvc::kMaxTokens)));
      }
      o.prefix_tokens.push_back(static_cast<uint32_t>(v));
    }
    if (p->n_fetch_threads < 0 || p->n_fetch_threads > 64)
      return Fail(kvc::InvalidArgument("fetch threads must be in 0..64"));
    o.fetch_threads = p->n_fetch_threads;
    o.threads = p->n_threads;
    SetQuality(p, &o.profile, &o.quality);
    o.progress = p->quiet == 0;
    auto report = kvc::RunTtftBenchJson(o);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(*report);
    return KVC_OK;
  });
}

kvc_status kvc_bench_video_json(const kvc_bench_video_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    kvc::VideoAblationOptions o;
    o.model_path = p->model_path;
    if (p->text_path) o.text_path = p->text_path;
    if (p->preset) o.preset = p->preset;
    if (p->ctx) o.ctx = p->ctx;
    if (p->chunk) o.chunk = p->chunk;
    if (p->min_seconds > 0) o.min_seconds = p->min_seconds;
    o.progress = p->quiet == 0;
    auto report = kvc::RunVideoAblationJson(o);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(*report);
    return KVC_OK;
  });
}

kvc_status kvc_bench_serve_json(const kvc_bench_serve_params* p, char** out_json) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    kvc::ServeBenchOptions o;
    o.model_path = p->model_path;
    if (p->text_path) o.text_path = p->text_path;
    if (p->calibration) o.calibration = p->calibration;
    if (p->codec) o.codec = p->codec;
    if (p->configs) o.configs = SplitList(p->configs);
    if (p->url) o.url = p->url;
    if (p->link_gbps < 0 || p->rate < 0 || p->shared_fraction < 0 || p->shared_fraction > 1) {
      return Fail(kvc::InvalidArgument("link rate and request rate must not be negative, shared fraction in 0..1"));
    }
    if (p->n_parallel < 0 || p->n_fetch_threads < 0)
      return Fail(kvc::InvalidArgument("parallel and fetch threads must not be negative"));
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
    auto report = kvc::RunServeBenchJson(o);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(*report);
    return KVC_OK;
  });
}

}  // extern "C"
