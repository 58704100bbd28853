// Speed of KVTC's math on the decode path (dequantise, reconstruct), the encode path
// (project, quantise) and calibration (covariance, bit allocation). Bytes/second count the KV
// a block stands for as fp16 (tokens x dim x 2 bytes), kvcodec's convention for throughput, so
// the figures compare with whole codecs. Args: dim (features per vector), kept components.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "transform_coding/bit_allocation.h"
#include "transform_coding/pca.h"
#include "transform_coding/quantizer.h"
#include "transform_coding/reconstruct_rows.h"

namespace kvc {
namespace {

constexpr uint32_t kTokens = 256;
constexpr uint32_t kGroupSize = 16;

// PCA calls fail only without room for BLAS's buffer: a machine that cannot run the benchmark.
void Must(const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "quantizer_bench: %s\n", status.ToString().c_str());
  std::abort();
}

// Correlated data with a decaying spectrum, like KV after RoPE is undone.
std::vector<float> Rows(uint32_t dim, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n * dim);
  for (size_t t = 0; t < n; ++t) {
    float shared = normal(rng);
    for (uint32_t d = 0; d < dim; ++d) {
      shared = 0.9f * shared + 0.45f * normal(rng);
      x[t * dim + d] = shared + 0.3f * normal(rng) + 0.01f * static_cast<float>(d % 7);
    }
  }
  return x;
}

const PcaBasis& Basis(uint32_t dim) {
  static std::map<uint32_t, PcaBasis> cache;
  auto it = cache.find(dim);
  if (it == cache.end()) {
    CovarianceAccumulator acc(dim);
    const std::vector<float> x = Rows(dim, 4 * size_t{dim}, 1);
    Must(acc.Add(x.data(), 4 * size_t{dim}));
    it = cache.emplace(dim, acc.Fit(dim).value()).first;
  }
  return it->second;
}

// 2..6 bits, widest first, as the DP gives leading components more.
std::vector<uint8_t> Widths(uint32_t n_keep) {
  const uint32_t groups = NumQuantGroups(n_keep, kGroupSize);
  std::vector<uint8_t> bits(groups);
  for (uint32_t g = 0; g < groups; ++g) bits[g] = static_cast<uint8_t>(6 - (4 * g) / std::max(groups, 2u));
  if (groups > 1) bits.back() = 2;
  return bits;
}

struct Block {
  std::vector<float> x;       // [kTokens][dim]
  std::vector<float> coeffs;  // [kTokens][n_keep]
  std::vector<uint8_t> bits;
  QuantizedBlock q;
};

Block MakeBlock(uint32_t dim, uint32_t n_keep) {
  Block b;
  b.x = Rows(dim, kTokens, 2);
  b.coeffs.resize(size_t{kTokens} * n_keep);
  Must(Project(Basis(dim), b.x.data(), kTokens, n_keep, b.coeffs.data()));
  b.bits = Widths(n_keep);
  QuantizeBlock(b.coeffs.data(), kTokens, n_keep, kGroupSize, b.bits, &b.q);
  return b;
}

void SetFp16Bytes(benchmark::State& state, uint32_t dim, uint32_t n_keep) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kTokens * dim * 2);
  state.counters["ns/coeff"] = benchmark::Counter(static_cast<double>(state.iterations()) * kTokens * n_keep,
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_DequantizeBlock(benchmark::State& state) {
  const auto dim = static_cast<uint32_t>(state.range(0));
  const auto n_keep = static_cast<uint32_t>(state.range(1));
  const Block b = MakeBlock(dim, n_keep);
  std::vector<float> out(b.coeffs.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    if (!DequantizeBlock(b.q, kTokens, n_keep, kGroupSize, b.bits, out.data()).ok()) {
      state.SkipWithError("DequantizeBlock failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  SetFp16Bytes(state, dim, n_keep);
}

// Third arg: the VectorIsa (skipped where this CPU lacks it), so one run compares the paths.
void BM_Reconstruct(benchmark::State& state) {
  const auto dim = static_cast<uint32_t>(state.range(0));
  const auto n_keep = static_cast<uint32_t>(state.range(1));
  const auto isa = static_cast<VectorIsa>(state.range(2));
  if (!VectorIsaSupported(isa)) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  state.SetLabel(VectorIsaName(ResolveVectorIsa(isa)));
  const Block b = MakeBlock(dim, n_keep);
  const PcaBasis& basis = Basis(dim);
  std::vector<float> out(b.x.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    ReconstructRows(basis.mean.data(), basis.components.data(), dim, b.coeffs.data(),
                    {.token_stride = n_keep, .component_stride = 1}, kTokens, n_keep, out.data(), dim, isa);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kTokens * dim * 2);
  // The product's own rate, to set against scripts/kvcal_cost.py's multiply-adds per byte.
  state.counters["GMAC"] = benchmark::Counter(static_cast<double>(state.iterations()) * kTokens * dim * n_keep / 1e9,
                                              benchmark::Counter::kIsRate);
}

void BM_DequantizeAndReconstruct(benchmark::State& state) {
  const auto dim = static_cast<uint32_t>(state.range(0));
  const auto n_keep = static_cast<uint32_t>(state.range(1));
  const Block b = MakeBlock(dim, n_keep);
  std::vector<float> coeffs(b.coeffs.size()), out(b.x.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    if (!DequantizeBlock(b.q, kTokens, n_keep, kGroupSize, b.bits, coeffs.data()).ok()) {
      state.SkipWithError("DequantizeBlock failed");
      return;
    }
    Reconstruct(Basis(dim), coeffs.data(), kTokens, n_keep, out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kTokens * dim * 2);
}

void BM_ProjectAndQuantize(benchmark::State& state) {
  const auto dim = static_cast<uint32_t>(state.range(0));
  const auto n_keep = static_cast<uint32_t>(state.range(1));
  Block b = MakeBlock(dim, n_keep);
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    Must(Project(Basis(dim), b.x.data(), kTokens, n_keep, b.coeffs.data()));
    QuantizeBlock(b.coeffs.data(), kTokens, n_keep, kGroupSize, b.bits, &b.q);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kTokens * dim * 2);
}

// (dim, kept components)
constexpr std::pair<int64_t, int64_t> kShapes[] = {
    {128, 40},    // one head (per layer-and-head basis)
    {128, 48},    // kvtiny's layer bases at level 16 (2 heads x 64; 48 kept on average)
    {1024, 320},  // 8 KV heads x 128 (per-layer basis)
};

void Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& [dim, n_keep] : kShapes) b->Args({dim, n_keep});
}

BENCHMARK(BM_DequantizeBlock)->Apply(Shapes);
BENCHMARK(BM_Reconstruct)->Apply([](benchmark::internal::Benchmark* b) {
  for (const VectorIsa k : {VectorIsa::kAuto, VectorIsa::kPortable, VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    for (const auto& [dim, n_keep] : kShapes) {
      b->Args({dim, n_keep, static_cast<int64_t>(k)});
    }
  }
});
BENCHMARK(BM_DequantizeAndReconstruct)->Apply(Shapes);
BENCHMARK(BM_ProjectAndQuantize)->Apply(Shapes);

// Calibration: rows/s folded into a covariance of the given dim.
void BM_CovarianceAdd(benchmark::State& state) {
  const auto dim = static_cast<uint32_t>(state.range(0));
  const std::vector<float> x = Rows(dim, 4096, 3);
  CovarianceAccumulator acc(dim);
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    Must(acc.Add(x.data(), 4096));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 4096);
}
BENCHMARK(BM_CovarianceAdd)->Arg(128)->Arg(1024);

// Calibration: eigen-decomposition of a dim x dim covariance, keeping every component.
void BM_PcaFit(benchmark::State& state) {
  const auto dim = static_cast<uint32_t>(state.range(0));
  const std::vector<float> x = Rows(dim, 2 * size_t{dim}, 4);
  CovarianceAccumulator acc(dim);
  Must(acc.Add(x.data(), 2 * size_t{dim}));
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto basis = acc.Fit(dim);
    benchmark::DoNotOptimize(basis);
  }
}
BENCHMARK(BM_PcaFit)->Arg(128)->Arg(1024)->Unit(benchmark::kMillisecond);

// The DP at its documented limit: 200 groups with costs of gcd 1, exact table of 150,000 bits.
void BM_AllocateBits(benchmark::State& state) {
  std::vector<AllocationGroup> groups;
  for (int g = 0; g < 200; ++g) {
    AllocationGroup a;
    a.n_components = g % 2 ? 125 : 123;
    for (int b = 0; b <= 8; ++b) a.error[b] = a.n_components * (1.0 + g % 13) * std::pow(4.0, -b);
    groups.push_back(a);
  }
  const auto budget = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto bits = AllocateBits(groups, budget);
    benchmark::DoNotOptimize(bits);
  }
}
BENCHMARK(BM_AllocateBits)->Arg(20000)->Arg(150000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvc
