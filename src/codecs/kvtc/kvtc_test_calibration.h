// Small synthetic kvtc calibrations and KV caches for kvtc_codec_test.cc and kvtc_fuzz.cc.
// Shared so that the fuzzer's calibrations are byte for byte the ones the test encodes its
// seeds with (a .kvc names its calibration by the hash of the .kvcal bytes). Everything is
// built from a private PRNG and IEEE arithmetic only (no <random> distributions, whose output
// differs between standard libraries), so gcc and clang builds produce the same calibrations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <span>
#include <utility>
#include <vector>

#include "base/byte_io.h"
#include "base/split_mix.h"
#include "codecs/fuzz_input.h"
#include "format/container.h"
#include "tensor/kv_cache.h"
#include "tensor/rope.h"
#include "transform_coding/calibration.h"

namespace kvc::kvtc_test {

inline constexpr ModelFingerprint kTestFingerprint{'k', 'v', 't', 'c', '-', 't', 'e', 's', 't', 0, 1, 2, 3, 4, 5, 6};

// splitmix64: tiny, and the same everywhere.
class TestRng {
 public:
  explicit TestRng(uint64_t seed) : rng_(seed) {}
  uint64_t Next() { return rng_.Next(); }
  // Uniform in [-1, 1), exactly representable (53 random bits).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1p-52 - 1.0; }

 private:
  SplitMix64 rng_;
};

struct TestCalibrationSpec {
  KvtcGrouping grouping = KvtcGrouping::kLayer;
  uint32_t n_layers = 2;
  uint32_t n_kv_heads = 2;
  uint32_t head_dim = 8;
  uint32_t group_size = 4;
  RopeParams rope{};
  bool keys_rope_undone = true;
  uint64_t seed = 1;
  // kComponent: group_size becomes 1, every component gets step multipliers, format version 2.
  // Token-group calibrations stay format version 1, so the seeds' calibration hashes hold.
  KvtcQuantizer quantizer = KvtcQuantizer::kTokenGroup;
  // K bases and bits only (format version 3), for caches of keys alone.
  bool keys_only = false;
};

// Bit widths per group for the allocations of MakeTestCalibration, indexed by group (the last
// entry repeats). Each has zero groups between non-zero ones, ratios 8 and 16 drop trailing
// groups, and a higher ratio never gives a group more bits than a lower one.
inline constexpr uint8_t kBits4[] = {8, 6, 4, 0, 3, 2};
inline constexpr uint8_t kBits8[] = {6, 3, 2, 0, 1, 0};
inline constexpr uint8_t kBits16[] = {3, 0, 1, 0};
inline constexpr uint8_t kBits64[] = {0};  // everything dropped: tokens decode to the means

// Orthonormal rows by Gram-Schmidt (twice, in double) on random vectors.
inline std::vector<float> TestOrthonormalRows(uint32_t n_rows, uint32_t dim, TestRng& rng) {
  std::vector<double> rows(size_t{n_rows} * dim);
  for (uint32_t r = 0; r < n_rows; ++r) {
    double* v = &rows[size_t{r} * dim];
    for (uint32_t d = 0; d < dim; ++d) v[d] = rng.Uniform();
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t q = 0; q < r; ++q) {
        const double* u = &rows[size_t{q} * dim];
        double dot = 0;
        for (uint32_t d = 0; d < dim; ++d) dot += u[d] * v[d];
        for (uint32_t d = 0; d < dim; ++d) v[d] -= dot * u[d];
      }
      double norm2 = 0;
      for (uint32_t d = 0; d < dim; ++d) norm2 += v[d] * v[d];
      const double inv = 1.0 / std::sqrt(norm2);
      for (uint32_t d = 0; d < dim; ++d) v[d] *= inv;
    }
  }
  return std::vector<float>(rows.begin(), rows.end());
}

// A valid calibration: even-numbered bases keep every component, odd ones three fewer (so a
// last group is short and the part of a vector outside the span is lost); eigenvalues decay
// geometrically; allocations at ratios 4, 8, 16 and 64 (kBits*, shifted by one group on V
// bases; at 16 the last basis, V's or in a keys-only calibration K's, gets no bits at all
// unless it is the only one, at 64 no basis does). The ratios are labels, not measured.
inline KvtcCalibration MakeTestCalibration(const TestCalibrationSpec& spec) {
  TestRng rng(spec.seed);
  KvtcCalibration c;
  c.model_fingerprint = kTestFingerprint;
  c.n_layers = spec.n_layers;
  c.n_kv_heads = spec.n_kv_heads;
  c.head_dim = spec.head_dim;
  c.keys_only = spec.keys_only;
  c.rope = spec.rope;
  c.keys_rope_undone = spec.keys_rope_undone;
  c.grouping = spec.grouping;
  c.quantizer = spec.quantizer;
  const bool component = spec.quantizer == KvtcQuantizer::kComponent;
  c.format_version = spec.keys_only ? 3 : component ? 2 : 1;
  c.group_size = component ? 1 : spec.group_size;
  if (component) {
    c.chunk_tokens = 64;
    c.choice = "component/test: synthetic";
  }
  c.fit_tokens = 1000;
  c.heldout_tokens = 100;
  const uint32_t dim = c.basis_dim();
  const uint32_t n_bases = c.n_bases();
  const uint32_t total_bases = c.n_kinds() * n_bases;
  for (uint32_t i = 0; i < total_bases; ++i) {
    PcaBasis b;
    b.dim = dim;
    b.n_components = i % 2 == 0 || dim <= 3 ? dim : dim - 3;
    b.mean.resize(dim);
    for (float& m : b.mean) m = static_cast<float>(0.5 * rng.Uniform());
    b.components = TestOrthonormalRows(b.n_components, dim, rng);
    double lambda = 4.0 * (1.0 + 0.25 * (i % 3));
    for (uint32_t k = 0; k < b.n_components; ++k, lambda *= 0.75) b.eigenvalues.push_back(static_cast<float>(lambda));
    if (component) {
      // Multipliers 0.5 .. 2 (2^(k/8)), as calibration chooses them.
      for (uint32_t k = 0; k < b.n_components * kKvtcWidths; ++k) {
        b.step_multipliers.push_back(std::exp2(static_cast<float>(static_cast<int>(rng.Next() % 17) - 8) / 8.0f));
      }
    }
    c.bases.push_back(std::move(b));
  }
  const std::pair<float, std::span<const uint8_t>> tables[] = {
      {4.0f, kBits4}, {8.0f, kBits8}, {16.0f, kBits16}, {64.0f, kBits64}};
  for (size_t a = 0; a < std::size(tables); ++a) {
    const auto& [ratio, pattern] = tables[a];
    BitAllocation alloc;
    alloc.target_ratio = ratio;
    alloc.heldout_rel_mse = 0.01 * static_cast<double>(a + 1);
    for (uint32_t i = 0; i < total_bases; ++i) {
      const bool value = i >= n_bases;
      // Not a lone basis: the level would then code nothing, like 64.
      const bool starve = ratio == 16.0f && i == total_bases - 1 && total_bases > 1;
      for (uint32_t g = 0; g < c.n_groups(i); ++g) {
        const size_t at = std::min<size_t>(g + (value ? 1 : 0), pattern.size() - 1);
        alloc.bits.push_back(starve ? 0 : pattern[at]);
      }
    }
    c.allocations.push_back(std::move(alloc));
  }
  return c;
}

// The calibrations kvtc_fuzz.cc registers, in order (its selector picks one by index).
inline std::vector<KvtcCalibration> FuzzCalibrations() {
  return {
      MakeTestCalibration({.grouping = KvtcGrouping::kLayer, .seed = 11}),
      MakeTestCalibration({.grouping = KvtcGrouping::kLayerHead,
                           .rope = {.type = RopeType::kNeox, .n_rot = 4, .freq_base = 500000.0f, .freq_scale = 0.5f},
                           .seed = 12}),
      MakeTestCalibration({.grouping = KvtcGrouping::kAll, .keys_rope_undone = false, .seed = 13}),
      MakeTestCalibration({.grouping = KvtcGrouping::kLayer, .seed = 14, .quantizer = KvtcQuantizer::kComponent}),
  };
}

// Where feature d of basis b (within its kind) lives: (layer, index within the layer's row
// [head][channel]), as docs/format.md's grouping table lays the basis vector out.
inline std::pair<uint32_t, uint32_t> TestFeatureOf(const KvtcCalibration& c, uint32_t b, uint32_t d) {
  const uint32_t row = c.n_kv_heads * c.head_dim;
  switch (c.grouping) {
    case KvtcGrouping::kLayerHead:
      return {b / c.n_kv_heads, (b % c.n_kv_heads) * c.head_dim + d};
    case KvtcGrouping::kLayer:
      return {b, d};
    case KvtcGrouping::kAll:
      return {d / row, d % row};
  }
  return {0, 0};
}

// A cache the calibration describes well: each basis slice of each token is
// mean + sum_c sqrt(eigenvalue_c) * u_c * component_c with u_c uniform of unit variance, plus
// uniform noise of amplitude `noise` on every feature; keys then get RoPE at their positions
// (when the calibration says keys were fitted with RoPE undone). Keys alone for a keys-only
// calibration.
inline KvCache MakeTestCache(const KvtcCalibration& c, uint32_t n_tokens, int32_t pos_begin, uint64_t seed,
                             DType dtype = DType::kF16, double noise = 0.05) {
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim, n_tokens, c.keys_only};
  KvCache cache = KvCache::Create(shape, dtype, pos_begin).value();
  TestRng rng(seed);
  const uint32_t n_bases = c.n_bases();
  const uint32_t dim = c.basis_dim();
  const size_t row = shape.row_elems();
  std::vector<std::vector<float>> layers(c.n_layers, std::vector<float>(row * n_tokens));
  std::vector<double> x(dim);
  for (KvKind kind : c.kinds()) {
    for (uint32_t b = 0; b < n_bases; ++b) {
      const PcaBasis& basis = c.bases[(kind == KvKind::kKey ? 0 : n_bases) + b];
      for (uint32_t t = 0; t < n_tokens; ++t) {
        for (uint32_t d = 0; d < dim; ++d) x[d] = basis.mean[d] + noise * rng.Uniform();
        for (uint32_t k = 0; k < basis.n_components; ++k) {
          const double u = std::sqrt(3.0 * basis.eigenvalues[k]) * rng.Uniform();
          const float* comp = &basis.components[size_t{k} * dim];
          for (uint32_t d = 0; d < dim; ++d) x[d] += u * comp[d];
        }
        for (uint32_t d = 0; d < dim; ++d) {
          const auto [layer, feature] = TestFeatureOf(c, b, d);
          layers[layer][t * row + feature] = static_cast<float>(x[d]);
        }
      }
    }
    for (uint32_t l = 0; l < c.n_layers; ++l) {
      if (kind == KvKind::kKey && c.keys_rope_undone) {
        RotateRows(c.rope, layers[l].data(), n_tokens, c.n_kv_heads, c.head_dim, pos_begin, false);
      }
      cache.WriteRowsF32(kind, l, 0, n_tokens, layers[l].data());
    }
  }
  return cache;
}

// The direct-decode input of kvtc_fuzz.cc; keep in step with its parser (layout there).
inline std::vector<uint8_t> FuzzDirectInput(uint8_t selector, uint16_t n_tokens, int32_t pos_begin,
                                            std::span<const uint8_t> params, const std::vector<KvcSection>& sections) {
  ByteWriter w;
  w.U8(selector);
  w.U16(n_tokens);
  w.I32(pos_begin);
  w.U16(static_cast<uint16_t>(params.size()));
  w.Bytes(params);
  WriteFuzzSections(w, sections);
  return w.Take();
}

}  // namespace kvc::kvtc_test
