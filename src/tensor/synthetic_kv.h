// Synthetic KV caches for tests and benchmarks: one loop that fills every row of a cache from a
// value function, and the statistics several tests share. Deterministic: a seed gives the same
// cache every run (std::mt19937 and libstdc++'s normal distribution).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "tensor/kv_cache.h"

namespace kvc {

// A cache of `shape` whose element (kind, layer, token, channel) is value(kind, layer, token,
// channel), called in that nesting order (K before V, then layer, token, channel), so a value
// function that draws random numbers sees them in a fixed order.
template <typename ValueFn>
KvCache FillKv(const KvShape& shape, DType dtype, int32_t pos_begin, ValueFn&& value) {
  KvCache cache = KvCache::Create(shape, dtype, pos_begin).value();
  if (shape.layer_elems() == 0) return cache;
  const size_t channels = shape.row_elems();
  std::vector<float> rows(shape.layer_elems());
  for (KvKind kind : shape.kinds()) {
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      for (uint32_t t = 0; t < shape.n_tokens; ++t) {
        for (size_t c = 0; c < channels; ++c) rows[size_t{t} * channels + c] = value(kind, l, t, c);
      }
      cache.WriteRowsF32(kind, l, 0, shape.n_tokens, rows.data());
    }
  }
  return cache;
}

// White noise, N(0, 1) everywhere.
inline KvCache NoiseKv(const KvShape& shape, DType dtype, uint32_t seed, int32_t pos_begin = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  return FillKv(shape, dtype, pos_begin, [&](KvKind, uint32_t, uint32_t, size_t) { return normal(rng); });
}

// Keys as a quantiser meets real ones: a per-channel offset and a few loud channels (every
// `loud_every`-th from `loud_phase`); values plain noise.
struct OutlierKeys {
  float offset_sigma = 2.0f;  // offsets ~ N(0, offset_sigma), one per channel for every layer
  uint32_t loud_every = 17;
  uint32_t loud_phase = 3;
  float loud = 40.0f;  // a loud channel's standard deviation
  float quiet = 1.0f;  // the others'
  float value_sigma = 0.5f;
};
inline KvCache OutlierKeysKv(const KvShape& shape, DType dtype, uint32_t seed, const OutlierKeys& p = {},
                             int32_t pos_begin = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> offset(shape.row_elems());
  for (float& o : offset) o = p.offset_sigma * normal(rng);
  return FillKv(shape, dtype, pos_begin, [&](KvKind kind, uint32_t, uint32_t, size_t c) {
    if (kind == KvKind::kValue) return p.value_sigma * normal(rng);
    return offset[c] + (c % p.loud_every == p.loud_phase ? p.loud : p.quiet) * normal(rng);
  });
}

}  // namespace kvc
