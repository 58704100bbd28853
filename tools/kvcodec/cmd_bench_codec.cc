// `kvcodec bench codec`: codec encode/decode MB/s on a real KV cache, beside memcpy.

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

struct BenchArgs {
  std::string model = DefaultModel(), text, calibration, codec = "kvtc", level;
  std::vector<std::string> params;
  uint32_t ctx = 1024, chunk = 256;
  int threads = 0;
  double min_seconds = 1.0;
  bool json = false;
};

int RunBenchCodec(const BenchArgs& a) {
  kvc_bench_codec_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.codec = a.codec.c_str();
  p.level = a.level.empty() ? nullptr : a.level.c_str();
  const std::string params = JoinParams(a.params);
  p.codec_params = params.empty() ? nullptr : params.c_str();
  p.ctx = a.ctx;
  p.chunk = a.chunk;
  p.n_threads = a.threads;
  p.min_seconds = a.min_seconds;
  auto report = kvcodec::BenchCodecJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("codec %s level %s: %u chunks of %u tokens, ratio %.2fx\n", Printable(j["codec"]).c_str(),
              Printable(j["level"]).c_str(), j["n_chunks"].get<unsigned>(), j["chunk"].get<unsigned>(),
              j["compression_ratio"].get<double>());
  std::printf("  %-8s %12s %12s %12s\n", "", "encode MB/s", "decode MB/s", "memcpy MB/s");
  std::printf("  %-8s %12.0f %12.0f %12.0f\n", "1 thread", j["encode_mb_s_1t"].get<double>(),
              j["decode_mb_s_1t"].get<double>(), j["memcpy_mb_s_1t"].get<double>());
  std::printf("  %-8s %12s %12.0f %12s  (one chunk at a time, a 2-thread pool in the codec)\n", "2 threads", "",
              j["decode_mb_s_2t"].get<double>(), "");
  std::printf("  %-8s %12.0f %12.0f %12.0f  (%u threads)\n", "all", j["encode_mb_s_all"].get<double>(),
              j["decode_mb_s_all"].get<double>(), j["memcpy_mb_s_all"].get<double>(), j["threads"].get<unsigned>());
  return 0;
}

}  // namespace

Command AddBenchCodecCommand(CLI::App* parent) {
  auto be = std::make_shared<BenchArgs>();
  auto* bench_codec = parent->add_subcommand("codec", "Codec encode/decode MB/s on a real KV cache, beside memcpy");
  AddModelOption(bench_codec, &be->model);
  bench_codec->add_option("--codec", be->codec, "Codec")->capture_default_str();
  bench_codec->add_option("--level", be->level, "Codec level");
  AddParamOption(bench_codec, &be->params);
  AddCalibrationOption(bench_codec, &be->calibration);
  bench_codec->add_option("--text", be->text, "Text to prefill (default: eval.txt beside the model)");
  bench_codec->add_option("--ctx", be->ctx, "Tokens prefilled")->capture_default_str();
  bench_codec->add_option("--chunk", be->chunk, "Tokens per encoded chunk")->capture_default_str();
  bench_codec->add_option("--threads", be->threads, "Threads for the all-cores figures (0: every core)");
  bench_codec->add_option("--min-seconds", be->min_seconds, "Time per measurement")->capture_default_str();
  AddJsonFlag(bench_codec, &be->json);
  return {bench_codec, [be] { return RunBenchCodec(*be); }};
}

}  // namespace kvcodec_cli
