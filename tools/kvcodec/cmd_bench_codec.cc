// `kvcodec bench codec`: codec encode/decode MB/s on a real KV cache, beside memcpy.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/codec_bench.h"
#include "cli_common.h"
#include "cli_lists.h"
#include "commands.h"

namespace kvcodec_cli {
namespace {

struct BenchArgs {
  kvc::CodecBenchOptions o;  // bound to the options; the parameters set from theirs
  std::vector<std::string> params;
  bool json = false;
  BenchArgs() { o.model_path = DefaultModel(); }
};

int RunBenchCodec(BenchArgs& a) {
  auto params = ParseCodecParams(a.params);
  if (!params.ok()) return Fail(params.status());
  a.o.encode.params = std::move(params).value();
  auto report = kvc::RunCodecBench(a.o);
  if (!report.ok()) return Fail(report.status());
  const kvc::CodecBenchReport& r = *report;
  if (a.json) {
    std::cout << kvc::CodecBenchReportJson(r) << "\n";
    return 0;
  }
  std::printf("codec %s level %s: %u chunks of %u tokens, ratio %.2fx\n", Printable(r.codec).c_str(),
              Printable(r.level).c_str(), r.n_chunks, r.chunk, r.compression_ratio);
  std::printf("  %-8s %12s %12s %12s\n", "", "encode MB/s", "decode MB/s", "memcpy MB/s");
  std::printf("  %-8s %12.0f %12.0f %12.0f\n", "1 thread", r.encode_mb_s_1t, r.decode_mb_s_1t, r.memcpy_mb_s_1t);
  std::printf("  %-8s %12s %12.0f %12s  (one chunk at a time, a 2-thread pool in the codec)\n", "2 threads", "",
              r.decode_mb_s_2t, "");
  std::printf("  %-8s %12.0f %12.0f %12.0f  (%u threads)\n", "all", r.encode_mb_s_all, r.decode_mb_s_all,
              r.memcpy_mb_s_all, r.threads);
  return 0;
}

}  // namespace

Command AddBenchCodecCommand(CLI::App* parent) {
  auto be = std::make_shared<BenchArgs>();
  kvc::CodecBenchOptions& o = be->o;
  auto* bench_codec = parent->add_subcommand("codec", "Codec encode/decode MB/s on a real KV cache, beside memcpy");
  AddModelOption(bench_codec, &o.model_path);
  bench_codec->add_option("--codec", o.codec, "Codec")->capture_default_str();
  bench_codec->add_option("--level", o.encode.level, "Codec level");
  AddParamOption(bench_codec, &be->params);
  AddCalibrationOption(bench_codec, &o.calibration);
  bench_codec->add_option("--text", o.text_path, "Text to prefill (default: eval.txt beside the model)");
  bench_codec->add_option("--ctx", o.ctx, "Tokens prefilled")->capture_default_str();
  bench_codec->add_option("--chunk", o.chunk, "Tokens per encoded chunk")->capture_default_str();
  bench_codec->add_option("--threads", o.threads, "Threads for the all-cores figures (0: every core)");
  bench_codec->add_option("--min-seconds", o.min_seconds, "Time per measurement")->capture_default_str();
  AddJsonFlag(bench_codec, &be->json);
  return {bench_codec, [be] { return RunBenchCodec(*be); }};
}

}  // namespace kvcodec_cli
