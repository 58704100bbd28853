// Helpers shared by the codec tests: synthetic KV caches and damaged-file builders.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "codecs/codec.h"
#include "format/container.h"
#include "tensor/kv_cache.h"
#include "tensor/synthetic_kv.h"

namespace kvc {

// KV with the structure delta and video coders exploit: per-channel offsets and magnitudes (a few loud
// channels, as in real keys) and tokens correlated in time, AR(1) per channel with rho in
// 0.5..0.9. correlated=false gives white noise with the same per-channel statistics.
inline KvCache MakeCache(const KvShape& shape, uint32_t seed, bool correlated = true, DType dtype = DType::kF16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.5f, 0.9f);
  const size_t channels = shape.row_elems();
  std::vector<float> offset(channels), magnitude(channels), rho(channels), state(channels);
  return FillKv(shape, dtype, 0, [&](KvKind kind, uint32_t, uint32_t t, size_t c) {
    if (t == 0) {  // a new (kind, layer): new channel statistics
      offset[c] = kind == KvKind::kKey ? 2.0f * normal(rng) : 0.1f * normal(rng);
      magnitude[c] = kind == KvKind::kKey && c % 11 == 3 ? 6.0f : 0.7f;
      rho[c] = correlated ? uniform(rng) : 0.0f;
      state[c] = normal(rng);
    } else {
      state[c] = rho[c] * state[c] + std::sqrt(1.0f - rho[c] * rho[c]) * normal(rng);
    }
    return offset[c] + magnitude[c] * state[c];
  });
}

// Re-serialises a valid file after `edit` changed its header or sections (fresh CRCs), so the
// codec, not the container, meets the damage.
inline std::vector<uint8_t> Rewrite(std::span<const uint8_t> bytes,
                                    const std::function<void(KvcHeader&, std::vector<KvcSection>&)>& edit) {
  KvcFile file = ReadKvc(bytes).value();
  std::vector<KvcSection> sections;
  for (const auto& s : file.sections) sections.push_back({s.tag, {s.bytes.begin(), s.bytes.end()}});
  edit(file.header, sections);
  return WriteKvc(file.header, sections).value();
}

// `good` after `edit` (fresh CRCs) must decode to kCorrupt: the codec's own checks catch it.
inline void ExpectEditIsCorrupt(std::span<const uint8_t> good, const char* name,
                                const std::function<void(KvcHeader&, std::vector<KvcSection>&)>& edit) {
  auto decoded = DecodeKvc(Rewrite(good, edit));
  ASSERT_FALSE(decoded.ok()) << name;
  EXPECT_EQ(decoded.status().code(), StatusCode::kCorrupt) << name << ": " << decoded.status().ToString();
}

}  // namespace kvc
