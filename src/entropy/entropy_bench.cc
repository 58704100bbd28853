// Speed of the entropy stages on 4 MiB inputs shaped like codec output: quantised Laplacian
// bytes (about 3 bits a byte of order-0 entropy, like KVTC's coefficients) and 4-bit codes
// packed two a byte (like the quant codec's). Bytes/second count the uncompressed bytes in
// both directions. The coded size relative to the input is reported as the "ratio" counter.
//   entropy_bench --benchmark_filter=Rans
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "entropy/block.h"
#include "entropy/deflate.h"
#include "entropy/entropy_test_data.h"
#include "entropy/rans.h"

namespace kvc {
namespace {

constexpr size_t kBytes = size_t{4} << 20;

const std::vector<uint8_t>& Input(int64_t kind) {
  static const std::vector<uint8_t> laplacian = testing::LaplacianBytes(kBytes, 2.0, 1);
  static const std::vector<uint8_t> nibbles = testing::PackedNibbles(kBytes, 1.0, 2);
  return kind == 0 ? laplacian : nibbles;
}

void Describe(benchmark::State& state, size_t coded) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  state.SetLabel(state.range(0) == 0 ? "laplacian" : "nibbles");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
  state.counters["ratio"] = static_cast<double>(coded) / static_cast<double>(data.size());
  state.counters["entropy_ratio"] = testing::Order0EntropyBytes(data) / static_cast<double>(data.size());
}

// A table of the bytes' counts over symbols 0..alphabet-1 (every byte must be below it).
FrequencyTable ByteTable(std::span<const uint8_t> data, uint32_t alphabet = 256, uint32_t scale_bits = 14) {
  std::vector<uint64_t> counts(alphabet);
  for (uint8_t b : data) ++counts[b];
  return FrequencyTable::FromCounts(counts, scale_bits).value();
}

// The coder alone: table built once, outside the loop.
void BM_RansEncode(benchmark::State& state) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  const FrequencyTable table = ByteTable(data);
  size_t coded = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto stream = RansEncodeBytes(table, data);
    coded = stream->size();
    benchmark::DoNotOptimize(stream->data());
  }
  Describe(state, coded);
}

void BM_RansDecode(benchmark::State& state) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  const FrequencyTable table = ByteTable(data);
  const std::vector<uint8_t> stream = RansEncodeBytes(table, data).value();
  std::vector<uint8_t> out(data.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    if (!RansDecodeBytes(table, stream, out).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  Describe(state, stream.size());
}

// The block coder end to end: histogram, table, coding, header.
void BM_BlockEncodeRans(benchmark::State& state) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  size_t coded = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto block = EncodeBlock(data, EntropyMethod::kRans);
    coded = block->size();
    benchmark::DoNotOptimize(block->data());
  }
  Describe(state, coded);
}

void BM_BlockDecodeRans(benchmark::State& state) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  const std::vector<uint8_t> block = EncodeBlock(data, EntropyMethod::kRans).value();
  std::vector<uint8_t> out(data.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    if (!DecodeBlockInto(block, out).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  Describe(state, block.size());
}

void BM_DeflateCompress(benchmark::State& state) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  const int level = static_cast<int>(state.range(1));
  size_t coded = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto c = DeflateCompress(data, level);
    coded = c->size();
    benchmark::DoNotOptimize(c->data());
  }
  Describe(state, coded);
}

void BM_DeflateDecompress(benchmark::State& state) {
  const std::vector<uint8_t>& data = Input(state.range(0));
  const std::vector<uint8_t> c = DeflateCompress(data, static_cast<int>(state.range(1))).value();
  std::vector<uint8_t> out(data.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    if (!DeflateDecompress(c, out).ok()) state.SkipWithError("decompress failed");
    benchmark::DoNotOptimize(out.data());
  }
  Describe(state, c.size());
}

// CacheGen's pattern: one table per channel, symbols cycling through the channels. 1024
// channels of 32-symbol alphabets at scale 12; items/second count symbols.
struct MultiContextData {
  std::vector<FrequencyTable> tables;
  std::vector<uint16_t> symbols;  // symbol i uses tables[i % tables.size()]
};

const MultiContextData& MultiContext() {
  static const MultiContextData d = [] {
    MultiContextData m;
    std::mt19937_64 rng(3);
    constexpr size_t kChannels = 1024;
    std::vector<std::discrete_distribution<uint16_t>> dists;
    for (size_t c = 0; c < kChannels; ++c) {
      std::vector<uint64_t> counts(32);
      const double spread = 0.5 + static_cast<double>(rng() % 100) / 25;
      for (int s = 0; s < 32; ++s) counts[s] = static_cast<uint64_t>(1 + 1e5 * std::exp(-std::abs(s - 16) / spread));
      m.tables.push_back(FrequencyTable::FromCounts(counts, 12).value());
      dists.emplace_back(counts.begin(), counts.end());
    }
    m.symbols.resize(kBytes);
    for (size_t i = 0; i < m.symbols.size(); ++i) m.symbols[i] = dists[i % kChannels](rng);
    return m;
  }();
  return d;
}

void BM_RansMultiContextEncode(benchmark::State& state) {
  const MultiContextData& m = MultiContext();
  RansEncoder enc;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    enc.Reserve(m.symbols.size());
    for (size_t i = 0; i < m.symbols.size(); ++i) enc.Put(m.tables[i % m.tables.size()], m.symbols[i]);
    auto stream = enc.Finish();
    benchmark::DoNotOptimize(stream->data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * m.symbols.size()));
}

void BM_RansMultiContextDecode(benchmark::State& state) {
  const MultiContextData& m = MultiContext();
  RansEncoder enc;
  for (size_t i = 0; i < m.symbols.size(); ++i) enc.Put(m.tables[i % m.tables.size()], m.symbols[i]);
  const std::vector<uint8_t> stream = enc.Finish().value();
  std::vector<uint16_t> out(m.symbols.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto d = RansDecoder::Open(stream);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint16_t>(d->Get(m.tables[i % m.tables.size()]));
    if (!d->Finish().ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * m.symbols.size()));
}

// GetBytes with one table, as kvtc's codes decode (a 16-symbol table at scale 10 for tuples of
// 1-2 bit codes, a 256-symbol one at 12 for the Laplacian bytes), in a stream of 4 states and
// a wide one (32). Args: states, 1 for 16-symbol tuples, the VectorIsa (skipped where this CPU
// lacks it).
void BM_RansGetBytes(benchmark::State& state) {
  const auto states = static_cast<uint32_t>(state.range(0));
  const bool tuples = state.range(1) == 1;
  const auto isa = static_cast<VectorIsa>(state.range(2));
  if (!VectorIsaSupported(isa)) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  std::vector<uint8_t> data = Input(0);
  if (tuples) {
    for (uint8_t& b : data) b &= 15;
  }
  const FrequencyTable table = tuples ? ByteTable(data, 16, 10) : ByteTable(data, 256, 12);
  RansEncoder enc;
  for (uint8_t b : data) enc.Put(table, b);
  const std::vector<uint8_t> stream = enc.Finish(states).value();
  std::vector<uint8_t> out(data.size());
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores)
    auto d = RansDecoder::Open(stream, states);
    if (!d->GetBytes(table, out, isa).ok() || !d->Finish().ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(tuples ? "16 symbols, " : "256 symbols, ") + VectorIsaName(ResolveVectorIsa(isa)));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}

BENCHMARK(BM_RansEncode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RansGetBytes)
    ->ArgsProduct({{kRansStates, kRansWideStates},
                   {0, 1},
                   {static_cast<int64_t>(VectorIsa::kAuto), static_cast<int64_t>(VectorIsa::kAvx2),
                    static_cast<int64_t>(VectorIsa::kAvx512)}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RansDecode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BlockEncodeRans)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BlockDecodeRans)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeflateCompress)->ArgsProduct({{0, 1}, {1, 6}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeflateDecompress)->ArgsProduct({{0, 1}, {1, 6}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RansMultiContextEncode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RansMultiContextDecode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvc
