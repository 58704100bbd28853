// Encode and decode speed of the quant codec on a 6-layer, 2-head, 64-dim, 1024-token fp16
// cache (3 MiB of KV). Bytes/second count the KV as fp16, the convention of every throughput
// figure in kvcodec, so codecs compare directly.
#include <benchmark/benchmark.h>

#include <random>

#include "codecs/codec.h"
#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

constexpr KvShape kShape{6, 2, 64, 1024};
constexpr ModelFingerprint kFp{};

const KvCache& Cache() {
  static const KvCache cache = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    return FillKv(kShape, DType::kF16, 0, [&](KvKind kind, uint32_t, uint32_t, size_t ch) {
      if (kind == KvKind::kValue) return normal(rng);
      return (ch % 13 == 5 ? 20.0f : 1.0f) * normal(rng) + static_cast<float>(ch % 7);
    });
  }();
  return cache;
}

EncodeOptions Options(const benchmark::State& state) { return {.level = std::to_string(state.range(0))}; }

void BM_QuantEncode(benchmark::State& state) {
  const Codec& codec = *FindCodec("quant");
  const KvView view = Cache().View();
  const EncodeOptions options = Options(state);
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto encoded = codec.Encode(view, options, {});
    if (!encoded.ok()) {
      state.SkipWithError(encoded.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(encoded->sections.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kShape.fp16_bytes()));
}

void BM_QuantDecode(benchmark::State& state) {
  auto bytes = EncodeKvc(*FindCodec("quant"), Cache().View(), Options(state), kFp, 0);
  if (!bytes.ok()) {
    state.SkipWithError(bytes.status().ToString().c_str());
    return;
  }
  // Times the codec alone, not the container's CRC pass.
  const KvcFile file = ReadKvc(*bytes).value();
  const Codec& codec = *FindCodec("quant");
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto decoded = codec.Decode(file, {});
    if (!decoded.ok()) {
      state.SkipWithError(decoded.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(decoded->Bytes(KvKind::kKey).data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kShape.fp16_bytes()));
  state.counters["ratio"] = static_cast<double>(kShape.fp16_bytes()) / static_cast<double>(bytes->size());
}

BENCHMARK(BM_QuantEncode)->Arg(8)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantDecode)->Arg(8)->Arg(4)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvc
