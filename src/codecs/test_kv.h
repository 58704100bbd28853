// Helpers shared by the codec tests: synthetic KV caches and damaged-file builders.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <span>
#include <utility>
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

// What every codec must call kCorrupt (ExpectEditIsCorrupt) in a keys-only file `keys` and a K and
// V file `both` of its own: sections that disagree with the header's kinds (a V section added,
// empty or not; the keys-only bit cleared or set; K tagged V; V missing), a K section cut or
// extended, more tokens than it holds.
inline void ExpectKindMismatchesAreCorrupt(std::span<const uint8_t> keys, std::span<const uint8_t> both) {
  using Edit = std::function<void(KvcHeader&, std::vector<KvcSection>&)>;
  const std::pair<const char*, Edit> keys_edits[] = {
      {"keys-only with a V section",
       [](KvcHeader&, std::vector<KvcSection>& s) {
         s.push_back({KvSectionTag(KvKind::kValue), s[0].bytes});
       }},
      {"keys-only with an empty V section",
       [](KvcHeader&, std::vector<KvcSection>& s) {
         s.push_back({KvSectionTag(KvKind::kValue), {}});
       }},
      {"keys-only header cleared", [](KvcHeader& h, std::vector<KvcSection>&) { h.shape.keys_only = false; }},
      {"keys-only K short", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.pop_back(); }},
      {"keys-only K long", [](KvcHeader&, std::vector<KvcSection>& s) { s[0].bytes.push_back(0); }},
      {"keys-only section tagged V",
       [](KvcHeader&, std::vector<KvcSection>& s) { s[0].tag = KvSectionTag(KvKind::kValue); }},
      {"keys-only more tokens", [](KvcHeader& h, std::vector<KvcSection>&) { ++h.shape.n_tokens; }},
  };
  for (const auto& [name, edit] : keys_edits) ExpectEditIsCorrupt(keys, name, edit);
  ExpectEditIsCorrupt(both, "K+V header set keys-only",
                      [](KvcHeader& h, std::vector<KvcSection>&) { h.shape.keys_only = true; });
  ExpectEditIsCorrupt(both, "K+V with one section", [](KvcHeader&, std::vector<KvcSection>& s) { s.pop_back(); });
}

}  // namespace kvc
