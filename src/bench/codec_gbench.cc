// Google Benchmark of every codec on a real KV cache from the test model: encode and decode of
// one 256-token chunk, bytes/s of fp16 KV. (`kvcodec bench codec` gives the same figures with
// all-core runs and memcpy beside them.)
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "codecs/codec.h"
#include "llama/llama_session.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {
namespace {

struct Fixture {
  std::unique_ptr<LlamaModel> model;
  KvCache kv;
  CalibrationRegistry calibrations;
};

Fixture& Shared() {
  static Fixture* f = [] {
    auto* fx = new Fixture();
    fx->model = std::move(LlamaModel::Load(KVCODEC_TEST_MODEL).value());
    std::ifstream in(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    auto tokens = fx->model->Tokenize(ss.str().substr(0, 20000), true).value();
    tokens.resize(512);
    SessionOptions so;
    so.n_ctx = 520;
    auto session = std::move(LlamaSession::Create(*fx->model, so).value());
    if (!session->Eval(tokens, false).ok()) std::abort();
    fx->kv = std::move(session->ExtractKv().value());
    if (!fx->calibrations.Load(std::filesystem::path(KVCODEC_TEST_MODEL).replace_extension(".kvcal").string()).ok())
      std::abort();
    return fx;
  }();
  return *f;
}

void BM_Encode(benchmark::State& state, const std::string& codec_name, const std::string& level) {
  Fixture& f = Shared();
  const Codec* codec = FindCodec(codec_name);
  const CodecContext context{&f.calibrations, &f.model->fingerprint(), nullptr};
  const KvView chunk = f.kv.View(256, 256).value();  // a chunk past the sink tokens
  EncodeOptions options;
  options.level = level;
  for (auto _ : state) {
    auto bytes = EncodeKvc(*codec, chunk, options, f.model->fingerprint(), 256, context);
    if (!bytes.ok()) state.SkipWithError(bytes.status().ToString().c_str());
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * chunk.shape().fp16_bytes()));
}

void BM_Decode(benchmark::State& state, const std::string& codec_name, const std::string& level) {
  Fixture& f = Shared();
  const Codec* codec = FindCodec(codec_name);
  const CodecContext context{&f.calibrations, &f.model->fingerprint(), nullptr};
  const KvView chunk = f.kv.View(256, 256).value();
  EncodeOptions options;
  options.level = level;
  const auto bytes = EncodeKvc(*codec, chunk, options, f.model->fingerprint(), 256, context).value();
  for (auto _ : state) {
    auto kv = DecodeKvc(bytes, &f.model->fingerprint(), context);
    if (!kv.ok()) state.SkipWithError(kv.status().ToString().c_str());
    benchmark::DoNotOptimize(kv);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * chunk.shape().fp16_bytes()));
  state.counters["ratio"] = static_cast<double>(chunk.shape().fp16_bytes()) / static_cast<double>(bytes.size());
}

#define KVC_CODEC_BENCH(codec, level)                                                           \
  BENCHMARK_CAPTURE(BM_Encode, codec##_##level, #codec, #level)->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(BM_Decode, codec##_##level, #codec, #level)->Unit(benchmark::kMicrosecond)

KVC_CODEC_BENCH(raw, fp16);
KVC_CODEC_BENCH(quant, 8);
KVC_CODEC_BENCH(quant, 4);
KVC_CODEC_BENCH(kvtc, 16);
KVC_CODEC_BENCH(kvtc, 20);
KVC_CODEC_BENCH(cachegen, medium);
KVC_CODEC_BENCH(video, 8);
KVC_CODEC_BENCH(video, 4);

}  // namespace
}  // namespace kvc
