#include "tensor/rope.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "base/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvc {

const char* RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kNormal:
      return "normal";
    case RopeType::kNeox:
      return "neox";
    case RopeType::kNone:
      return "none";
    case RopeType::kMrope:
      return "mrope";
    case RopeType::kImrope:
      return "imrope";
    case RopeType::kVision:
      return "vision";
  }
  return "unknown";
}

std::optional<RopeType> ParseRopeType(std::string_view name) {
  for (uint8_t t = 0; t <= static_cast<uint8_t>(kLastRopeType); ++t) {
    if (name == RopeTypeName(static_cast<RopeType>(t))) return static_cast<RopeType>(t);
  }
  return std::nullopt;
}

void RotateRows(const RopeParams& params, float* rows, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim,
                int32_t pos_begin, bool inverse) {
  if (!RopeRotatesKeys(params.type)) return;
  const uint32_t n_rot = params.n_rot == 0 || params.n_rot > head_dim ? head_dim : params.n_rot;
  const uint32_t half = n_rot / 2;
  // Same recurrence as ggml's rope cache (theta *= theta_scale in fp32), so angles match the
  // ones llama.cpp used to the last bit as far as libm allows.
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(n_rot));
  std::vector<float> cos_t(half), sin_t(half);
  const float sign = inverse ? -1.0f : 1.0f;
  for (uint32_t t = 0; t < n_tokens; ++t) {
    float theta = static_cast<float>(pos_begin + static_cast<int32_t>(t)) * params.freq_scale;
    for (uint32_t i = 0; i < half; ++i) {
      cos_t[i] = std::cos(theta);
      sin_t[i] = sign * std::sin(theta);
      theta *= theta_scale;
    }
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* x = rows + (size_t{t} * n_heads + h) * head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t a = params.type == RopeType::kNormal ? 2 * i : i;
        const uint32_t b = params.type == RopeType::kNormal ? 2 * i + 1 : i + half;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * cos_t[i] - x1 * sin_t[i];
        x[b] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

namespace {

// Angles of kBlockTokens positions from the block's first: the same recurrence, in the same
// order, as RotateRows, so a cached value is bit for bit the one computed on the spot.
std::shared_ptr<const RopeTable::Block> ComputeBlock(const RopeParams& params, uint32_t half, float theta_scale,
                                                     int64_t block) {
  auto out = std::make_shared<RopeTable::Block>();
  const uint32_t n = RopeTable::kBlockTokens;
  out->cos.resize(size_t{n} * half);
  out->sin.resize(size_t{n} * half);
  for (uint32_t t = 0; t < n; ++t) {
    // Positions past int32 only pad the last block; no token ever sits there.
    const auto pos = static_cast<int32_t>(std::clamp<int64_t>(block * n + t, INT32_MIN, INT32_MAX));
    float theta = static_cast<float>(pos) * params.freq_scale;
    for (uint32_t i = 0; i < half; ++i) {
      out->cos[size_t{t} * half + i] = std::cos(theta);
      out->sin[size_t{t} * half + i] = std::sin(theta);
      theta *= theta_scale;
    }
  }
  if (params.type == RopeType::kNormal) {
    out->cos2.resize(out->cos.size() * 2);
    out->sin2.resize(out->sin.size() * 2);
    for (size_t k = 0; k < out->cos.size(); ++k) {
      out->cos2[2 * k] = out->cos2[2 * k + 1] = out->cos[k];
      out->sin2[2 * k] = -out->sin[k];
      out->sin2[2 * k + 1] = out->sin[k];
    }
  }
  return out;
}

// Process-wide cache of blocks keyed by (rope params, rotated pairs, block). Bounded: once it
// would hold more than kMaxCachedFloats it is emptied (tables in use keep their blocks alive).
class RopeBlockCache {
 public:
  std::shared_ptr<const RopeTable::Block> Get(const RopeParams& params, uint32_t half, float theta_scale,
                                              int64_t block) {
    const Key key{static_cast<uint8_t>(params.type), Bits(params.freq_base), Bits(params.freq_scale), half, block};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = blocks_.find(key); it != blocks_.end()) return it->second;
    }
    std::shared_ptr<const RopeTable::Block> computed = ComputeBlock(params, half, theta_scale, block);
    const size_t floats = computed->cos.size() * 2 + computed->cos2.size() * 2;
    std::lock_guard<std::mutex> lock(mu_);
    if (floats > kMaxCachedFloats) return computed;
    if (auto it = blocks_.find(key); it != blocks_.end()) return it->second;  // another thread won
    if (held_ + floats > kMaxCachedFloats) {
      blocks_.clear();
      held_ = 0;
    }
    blocks_.emplace(key, computed);
    held_ += floats;
    return computed;
  }

 private:
  static constexpr size_t kMaxCachedFloats = size_t{8} << 20;  // 32 MiB
  static uint32_t Bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  }
  // n_rot enters through `half` (the table's rotated pairs), which also fixes theta_scale.
  using Key = std::tuple<uint8_t, uint32_t, uint32_t, uint32_t, int64_t>;
  std::mutex mu_;
  std::map<Key, std::shared_ptr<const RopeTable::Block>> blocks_;
  size_t held_ = 0;
};

RopeBlockCache& BlockCache() {
  static auto* cache = new RopeBlockCache();  // never destroyed: tables may outlive static teardown
  return *cache;
}

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

RopeTable::RopeTable(const RopeParams& params, uint32_t head_dim, int32_t pos_begin, uint32_t n_tokens)
    : params_(params), head_dim_(head_dim), n_tokens_(n_tokens), pos_begin_(pos_begin) {
  n_rot_ = params.n_rot == 0 || params.n_rot > head_dim ? head_dim : params.n_rot;
  // No pairs: every rotation below is then the identity (and RotateTokensToFp16 a conversion).
  if (!RopeRotatesKeys(params.type)) n_rot_ = 0;
  const uint32_t half = n_rot_ / 2;
  first_block_ = FloorDiv(pos_begin, kBlockTokens);
  if (n_tokens == 0 || half == 0) return;
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(n_rot_));
  const int64_t last_block = FloorDiv(int64_t{pos_begin} + n_tokens - 1, kBlockTokens);
  for (int64_t b = first_block_; b <= last_block; ++b) {
    blocks_.push_back(BlockCache().Get(params, half, theta_scale, b));
  }
}

namespace {

#if defined(__x86_64__)
bool HasAvx() {
  static const bool has = __builtin_cpu_supports("avx");
  return has;
}

// The AVX forms of the loops below, eight floats at a time with the same operations (no FMA:
// a fused product would round differently from the SSE and scalar paths). Return the pairs done.
// c2 and s2 are the block's interleaved cos2/sin2 at this token: (c, c) and (-s, s) per pair,
// so sss below is s2 times the sign (exact) and the products are those of the other paths.
// `in` may be `out` (every vector is loaded before its results are stored).
__attribute__((target("avx"))) uint32_t RotateNormalAvx(const float* in, float* out, const float* c2, const float* s2,
                                                        uint32_t half, float sign) {
  const __m256 sign8 = _mm256_set1_ps(sign);
  uint32_t i = 0;
  for (; i + 4 <= half; i += 4) {
    const __m256 v = _mm256_loadu_ps(in + 2 * i);
    const __m256 cc = _mm256_loadu_ps(c2 + 2 * i);
    const __m256 sss = _mm256_mul_ps(_mm256_loadu_ps(s2 + 2 * i), sign8);
    const __m256 swapped = _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
    _mm256_storeu_ps(out + 2 * i, _mm256_add_ps(_mm256_mul_ps(v, cc), _mm256_mul_ps(swapped, sss)));
  }
  return i;
}

__attribute__((target("avx"))) uint32_t RotateNeoxAvx(const float* in, float* out, const float* c, const float* s,
                                                      uint32_t half, float sign) {
  const __m256 sign8 = _mm256_set1_ps(sign);
  uint32_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(in + i), x1 = _mm256_loadu_ps(in + i + half);
    const __m256 c8 = _mm256_loadu_ps(c + i), s8 = _mm256_mul_ps(sign8, _mm256_loadu_ps(s + i));
    const __m256 neg_s8 = _mm256_sub_ps(_mm256_setzero_ps(), s8);
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_mul_ps(x0, c8), _mm256_mul_ps(x1, neg_s8)));
    _mm256_storeu_ps(out + i + half, _mm256_add_ps(_mm256_mul_ps(x1, c8), _mm256_mul_ps(x0, s8)));
  }
  return i;
}
#endif

// One head's rotation by one token's angles: pairs (2i, 2i + 1) for kNormal, (i, i + half) for
// kNeox; `sign` -1 rotates backwards. The AVX and SSE paths do the same products in the same
// order as the scalar tails (x0 * c - x1 * s and x0 * s + x1 * c, each rounded once per
// operation), so results do not depend on which path ran. The rotated pairs of `in` go to
// `out`, which may be `in`; channels past the pairs are not touched.
inline void RotateNormal(const float* in, float* out, const float* c, const float* s, const float* c2, const float* s2,
                         uint32_t half, float sign) {
  uint32_t i = 0;
#if defined(__x86_64__)
  if (HasAvx()) i = RotateNormalAvx(in, out, c2, s2, half, sign);
  // Four floats hold two pairs: out = x * (c0 c0 c1 c1) + swap(x) * (-s0 s0 -s1 s1) * sign.
  const __m128 sign4 = _mm_set1_ps(sign);
  for (; i + 2 <= half; i += 2) {
    const __m128 v = _mm_loadu_ps(in + 2 * i);
    const __m128 cc = _mm_loadu_ps(c2 + 2 * i);
    const __m128 sss = _mm_mul_ps(_mm_loadu_ps(s2 + 2 * i), sign4);
    const __m128 swapped = _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1));
    _mm_storeu_ps(out + 2 * i, _mm_add_ps(_mm_mul_ps(v, cc), _mm_mul_ps(swapped, sss)));
  }
#endif
  for (; i < half; ++i) {
    const float x0 = in[2 * i], x1 = in[2 * i + 1], si = sign * s[i];
    out[2 * i] = x0 * c[i] + x1 * -si;
    out[2 * i + 1] = x1 * c[i] + x0 * si;
  }
}

inline void RotateNeox(const float* in, float* out, const float* c, const float* s, uint32_t half, float sign) {
  uint32_t i = 0;
#if defined(__x86_64__)
  if (HasAvx()) i = RotateNeoxAvx(in, out, c, s, half, sign);
  const __m128 sign4 = _mm_set1_ps(sign);
  for (; i + 4 <= half; i += 4) {
    const __m128 x0 = _mm_loadu_ps(in + i), x1 = _mm_loadu_ps(in + i + half);
    const __m128 c4 = _mm_loadu_ps(c + i), s4 = _mm_mul_ps(sign4, _mm_loadu_ps(s + i));
    const __m128 neg_s4 = _mm_sub_ps(_mm_setzero_ps(), s4);
    _mm_storeu_ps(out + i, _mm_add_ps(_mm_mul_ps(x0, c4), _mm_mul_ps(x1, neg_s4)));
    _mm_storeu_ps(out + i + half, _mm_add_ps(_mm_mul_ps(x1, c4), _mm_mul_ps(x0, s4)));
  }
#endif
  for (; i < half; ++i) {
    const float x0 = in[i], x1 = in[i + half], si = sign * s[i];
    out[i] = x0 * c[i] + x1 * -si;
    out[i + half] = x1 * c[i] + x0 * si;
  }
}

#if defined(__x86_64__)
// RotateNormalAvx and RotateNeoxAvx 16 floats at a time, each result clamped to fp16's range
// and converted on the way out (Fp32ToFp16Clamped's operations). The products and sums are the
// _round forms: GCC contracts a plain _mm512_mul_ps + _mm512_add_ps into a fused multiply-add
// where the target has FMA (every AVX-512 one), which would round differently from the other
// paths. Return the pairs done.
// (GCC 12's avx512fintrin.h warns about its own _mm512_undefined_* in the intrinsics.)
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC warning group clang does not know
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"), always_inline)) inline __m512 Mul512(__m512 a, __m512 b) {
  return _mm512_mul_round_ps(a, b, _MM_FROUND_CUR_DIRECTION);
}
__attribute__((target("avx512f"), always_inline)) inline __m512 Add512(__m512 a, __m512 b) {
  return _mm512_add_round_ps(a, b, _MM_FROUND_CUR_DIRECTION);
}
__attribute__((target("avx512f"), always_inline)) inline void StoreClampedFp16(uint16_t* out, __m512 v) {
  const __m512 clamped = _mm512_min_ps(_mm512_set1_ps(65504.0f), _mm512_max_ps(_mm512_set1_ps(-65504.0f), v));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtps_ph(clamped, _MM_FROUND_TO_NEAREST_INT));
}

// One token's heads (head_dim floats apart); each vector of angles is loaded once for them all.
__attribute__((target("avx512f"))) uint32_t RotateNormalToFp16Avx512(const float* x, uint16_t* out, const float* c2,
                                                                     const float* s2, uint32_t half, uint32_t n_heads,
                                                                     uint32_t head_dim, float sign) {
  const __m512 sign16 = _mm512_set1_ps(sign);
  uint32_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m512 cc = _mm512_loadu_ps(c2 + 2 * i);
    const __m512 sss = Mul512(_mm512_loadu_ps(s2 + 2 * i), sign16);
    for (size_t at = 2 * i; at < size_t{n_heads} * head_dim; at += head_dim) {
      const __m512 v = _mm512_loadu_ps(x + at);
      const __m512 swapped = _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
      StoreClampedFp16(out + at, Add512(Mul512(v, cc), Mul512(swapped, sss)));
    }
  }
  return i;
}

__attribute__((target("avx512f"))) uint32_t RotateNeoxToFp16Avx512(const float* x, uint16_t* out, const float* c,
                                                                   const float* s, uint32_t half, uint32_t n_heads,
                                                                   uint32_t head_dim, float sign) {
  const __m512 sign16 = _mm512_set1_ps(sign);
  uint32_t i = 0;
  for (; i + 16 <= half; i += 16) {
    const __m512 c16 = _mm512_loadu_ps(c + i), s16 = Mul512(sign16, _mm512_loadu_ps(s + i));
    const __m512 neg_s16 = _mm512_sub_round_ps(_mm512_setzero_ps(), s16, _MM_FROUND_CUR_DIRECTION);
    for (size_t at = i; at < size_t{n_heads} * head_dim; at += head_dim) {
      const __m512 x0 = _mm512_loadu_ps(x + at), x1 = _mm512_loadu_ps(x + at + half);
      StoreClampedFp16(out + at, Add512(Mul512(x0, c16), Mul512(x1, neg_s16)));
      StoreClampedFp16(out + at + half, Add512(Mul512(x1, c16), Mul512(x0, s16)));
    }
  }
  return i;
}
#pragma GCC diagnostic pop
#endif

}  // namespace

RopeTable::Angles RopeTable::AnglesAt(uint32_t t) const {
  const int64_t pos = int64_t{pos_begin_} + t;
  const int64_t block = FloorDiv(pos, kBlockTokens);
  const Block& b = *blocks_[static_cast<size_t>(block - first_block_)];
  const size_t at = static_cast<size_t>(pos - block * kBlockTokens) * (n_rot_ / 2);
  const bool normal = params_.type == RopeType::kNormal;
  return {.cos = &b.cos[at],
          .sin = &b.sin[at],
          .cos2 = normal ? &b.cos2[2 * at] : nullptr,
          .sin2 = normal ? &b.sin2[2 * at] : nullptr};
}

void RopeTable::RotateTokens(float* rows, uint32_t first, uint32_t count, uint32_t n_heads, bool inverse) const {
  const uint32_t half = n_rot_ / 2;
  if (half == 0) return;
  const float sign = inverse ? -1.0f : 1.0f;
  const bool normal = params_.type == RopeType::kNormal;
  for (uint32_t t = first; t < first + count; ++t) {
    const Angles a = AnglesAt(t);
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* x = rows + (size_t{t - first} * n_heads + h) * head_dim_;
      if (normal) {
        RotateNormal(x, x, a.cos, a.sin, a.cos2, a.sin2, half, sign);
      } else {
        RotateNeox(x, x, a.cos, a.sin, half, sign);
      }
    }
  }
}

void RopeTable::RotateTokensToFp16(const float* rows, uint32_t first, uint32_t count, uint32_t n_heads, bool inverse,
                                   uint16_t* out, VectorIsa isa) const {
  const size_t row = size_t{n_heads} * head_dim_;
  const uint32_t half = n_rot_ / 2;
  if (half == 0) {
    Fp32ToFp16Clamped(rows, out, row * count, isa);
    return;
  }
#if defined(__x86_64__)
  if (ResolveVectorIsa(isa) == VectorIsa::kAvx512) {
    const float sign = inverse ? -1.0f : 1.0f;
    const bool normal = params_.type == RopeType::kNormal;
    for (uint32_t t = first; t < first + count; ++t) {
      const Angles a = AnglesAt(t);
      const float* const token = rows + size_t{t - first} * row;
      uint16_t* const token_out = out + size_t{t - first} * row;
      const uint32_t vector_pairs =
          normal ? RotateNormalToFp16Avx512(token, token_out, a.cos2, a.sin2, half, n_heads, head_dim_, sign)
                 : RotateNeoxToFp16Avx512(token, token_out, a.cos, a.sin, half, n_heads, head_dim_, sign);
      if (vector_pairs == half && 2 * half == head_dim_) continue;
      for (uint32_t h = 0; h < n_heads; ++h) {
        const float* const x = token + size_t{h} * head_dim_;
        uint16_t* const o = token_out + size_t{h} * head_dim_;
        for (uint32_t i = vector_pairs; i < half; ++i) {  // past the last full vector, as RotateNormal/RotateNeox
          const uint32_t i0 = normal ? 2 * i : i, i1 = normal ? 2 * i + 1 : i + half;
          const float x0 = x[i0], x1 = x[i1], si = sign * a.sin[i];
          o[i0] = Fp32ToFp16Clamped(x0 * a.cos[i] + x1 * -si);
          o[i1] = Fp32ToFp16Clamped(x1 * a.cos[i] + x0 * si);
        }
        if (2 * half < head_dim_) Fp32ToFp16Clamped(x + 2 * half, o + 2 * half, head_dim_ - 2 * half, isa);
      }
    }
    return;
  }
#endif
  // Other CPUs rotate each token into a buffer and convert that: the same operations in two
  // passes, with the reads and writes of rotating in place.
  thread_local std::vector<float> rotated;
  rotated.resize(row);
  const float sign = inverse ? -1.0f : 1.0f;
  for (uint32_t t = first; t < first + count; ++t) {
    const Angles a = AnglesAt(t);
    const float* const token = rows + size_t{t - first} * row;
    for (uint32_t h = 0; h < n_heads; ++h) {
      const float* const x = token + size_t{h} * head_dim_;
      float* const r = rotated.data() + size_t{h} * head_dim_;
      if (params_.type == RopeType::kNormal) {
        RotateNormal(x, r, a.cos, a.sin, a.cos2, a.sin2, half, sign);
      } else {
        RotateNeox(x, r, a.cos, a.sin, half, sign);
      }
      std::copy(x + 2 * half, x + head_dim_, r + 2 * half);  // channels past the rotated ones
    }
    Fp32ToFp16Clamped(rotated.data(), out + size_t{t - first} * row, row, isa);
  }
}

}  // namespace kvc
