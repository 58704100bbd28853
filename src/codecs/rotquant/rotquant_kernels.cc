#include "codecs/rotquant/rotquant_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include "base/half.h"
#include "base/split_mix.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvc::rotquant {
namespace {

constexpr float kFp16Max = 65504.0f;
constexpr uint8_t kMaxScaleCode = 254;

// Lloyd-Max quantiser of N(0, 1), positive half (the negative half mirrors it): the centroids
// that minimise the mean squared error. Computed by Lloyd's iteration to convergence in double,
// rounded to float once here.
constexpr float kHalf2[] = {0.4527800381183624f, 1.5104175806045532f};
constexpr float kHalf3[] = {0.2450941801071167f, 0.7560052871704102f, 1.3439092636108398f, 2.1519455909729004f};
constexpr float kHalf4[] = {0.12839503586292267f, 0.38804829120635986f, 0.6567591428756714f, 0.9423404335975647f,
                            1.2562311887741089f,  1.6180464029312134f,  2.069017171859741f,  2.7325894832611084f};

// 2^(-j/16) for j in 0..15, correctly rounded: scale codes decode with these and exact powers of
// two only, so every machine rebuilds the same scale.
constexpr float kScaleSteps[16] = {1.0f,
                                   0.9576032757759094f,
                                   0.9170040488243103f,
                                   0.8781260848045349f,
                                   0.8408964276313782f,
                                   0.8052451610565186f,
                                   0.7711054086685181f,
                                   0.7384130954742432f,
                                   0.7071067690849304f,
                                   0.6771277785301208f,
                                   0.6484197974205017f,
                                   0.6209288835525513f,
                                   0.5946035385131836f,
                                   0.5693942904472351f,
                                   0.5452538728713989f,
                                   0.5221368670463562f};
// 2^-k for k in 0..15: a product with one of these is exact, or rounds once where it is
// subnormal, as ldexp does.
constexpr float kPowersOfHalf[16] = {1.0f,    0x1p-1f, 0x1p-2f,  0x1p-3f,  0x1p-4f,  0x1p-5f,  0x1p-6f,  0x1p-7f,
                                     0x1p-8f, 0x1p-9f, 0x1p-10f, 0x1p-11f, 0x1p-12f, 0x1p-13f, 0x1p-14f, 0x1p-15f};

inline float ToFloat(float x) { return x; }
inline float ToFloat(uint16_t h) { return Fp16ToFp32(h); }
template <typename Out>
Out FromFloat(float x) {
  if constexpr (std::is_same_v<Out, uint16_t>) {
    return Fp32ToFp16(x);
  } else {
    return x;
  }
}

// In place: the unnormalised Walsh-Hadamard butterflies of one block of n (a power of two),
// stages h = 1, 2, 4, ... in that order. The first three stages work on 8 values at a time.
void Butterflies(float* v, uint32_t n) {
  uint32_t h = 1;
  if (n >= 8) {
    for (uint32_t i = 0; i < n; i += 8) {
      float* w = v + i;
      const float a0 = w[0] + w[1], a1 = w[0] - w[1], a2 = w[2] + w[3], a3 = w[2] - w[3];
      const float a4 = w[4] + w[5], a5 = w[4] - w[5], a6 = w[6] + w[7], a7 = w[6] - w[7];
      const float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
      const float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
      w[0] = b0 + b4, w[4] = b0 - b4, w[1] = b1 + b5, w[5] = b1 - b5;
      w[2] = b2 + b6, w[6] = b2 - b6, w[3] = b3 + b7, w[7] = b3 - b7;
    }
    h = 8;
  }
  for (; h < n; h *= 2) {
    for (uint32_t i = 0; i < n; i += 2 * h) {
      float* lo = v + i;
      float* hi = v + i + h;
      for (uint32_t j = 0; j < h; ++j) {
        const float a = lo[j];
        const float b = hi[j];
        lo[j] = a + b;
        hi[j] = a - b;
      }
    }
  }
}

// The RMS of a rotated vector: squares summed in fp32 into 8 partial sums (value c into c mod 8,
// in order), the partial sums added in double: the order both paths keep.
double RmsOfPartials(const float partial[8], uint32_t dim) {
  double sum = 0;
  for (int k = 0; k < 8; ++k) sum += partial[k];
  return std::sqrt(sum / dim);
}

#if defined(__x86_64__)

// AVX2 without FMA throughout: GCC would fuse a multiply and an add of intrinsics into one FMA
// (-ffp-contract=fast), whose single rounding differs from the portable path's two.

// 8 values from floats or fp16 (an exact conversion), and 8 values to floats or, rounded to
// nearest even as Fp32ToFp16 does, to fp16.
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,f16c"), always_inline)) inline void Store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
__attribute__((target("avx2,f16c"), always_inline)) inline void Store8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// The three in-register stages of Butterflies on 8 values: each output is the scalar path's sum
// or difference of the same two values (a sign flip is exact), so the bits are the same.
__attribute__((target("avx2"), always_inline)) inline __m256 Butterfly8(__m256 a) {
  const __m256 s1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, INT32_MIN, INT32_MIN, 0, 0, INT32_MIN, INT32_MIN));
  const __m256 s4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN));
  // (x0, x1) -> (x1 + x0, x0 - x1): the partner plus or minus this lane.
  a = _mm256_add_ps(_mm256_permute_ps(a, 0xB1), _mm256_xor_ps(a, s1));
  a = _mm256_add_ps(_mm256_permute_ps(a, 0x4E), _mm256_xor_ps(a, s2));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, a, 0x01), _mm256_xor_ps(a, s4));
}

__attribute__((target("avx2"))) void ButterfliesAvx2(float* v, uint32_t n) {
  for (uint32_t i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, Butterfly8(_mm256_loadu_ps(v + i)));
  for (uint32_t h = 8; h < n; h *= 2) {
    for (uint32_t i = 0; i < n; i += 2 * h) {
      for (uint32_t j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(v + j);
        const __m256 b = _mm256_loadu_ps(v + j + h);
        _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
      }
    }
  }
}

// The block sizes kept in registers (larger blocks go through memory): calls f with n as a
// compile-time constant, so each kernel's register array and loops are sized for that block, and
// says whether n was one of them. f carries its caller's target attribute (the kernels are
// always_inline for that target) and is not always_inline itself: GCC and clang refuse to inline
// target code into this untargeted helper, so f is inlined into the caller instead.
template <typename F>
__attribute__((always_inline)) inline bool WithRegisterBlockSize(uint32_t n, F&& f) {
  switch (n) {
    case 8:
      f(std::integral_constant<uint32_t, 8>{});
      return true;
    case 16:
      f(std::integral_constant<uint32_t, 16>{});
      return true;
    case 32:
      f(std::integral_constant<uint32_t, 32>{});
      return true;
    case 64:
      f(std::integral_constant<uint32_t, 64>{});
      return true;
    case 128:
      f(std::integral_constant<uint32_t, 128>{});
      return true;
    default:
      return false;
  }
}

// The 8 codes of kBits bits starting at `p` (8 codes are kBits whole bytes).
// `spare`: a byte past the 8 codes may be read (one 32-bit load for 3-bit codes).
template <uint32_t kBits, bool kSpare = false>
__attribute__((target("avx2"), always_inline)) inline __m256i Codes8(const uint8_t* p) {
  uint32_t word;
  if constexpr (kBits == 4 || (kBits == 3 && kSpare)) {
    std::memcpy(&word, p, 4);
  } else {
    // Byte by byte: a 3-byte memcpy is a library call here.
    word = p[0] | uint32_t{p[1]} << 8;
    if constexpr (kBits >= 3) word |= uint32_t{p[2]} << 16;
  }
  const __m256i shifts = _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts),
                          _mm256_set1_epi32((1 << kBits) - 1));
}

// Butterflies of one block of kN (8..128) values held in registers: the same sums and
// differences as Butterflies, in the same stages.
template <uint32_t kN>
__attribute__((target("avx2"), always_inline)) inline void ButterfliesInRegisters(__m256* r) {
  for (uint32_t i = 0; i < kN / 8; ++i) r[i] = Butterfly8(r[i]);
  for (uint32_t h = 1; h < kN / 8; h *= 2) {
    for (uint32_t i = 0; i < kN / 8; i += 2 * h) {
      for (uint32_t j = i; j < i + h; ++j) {
        const __m256 a = r[j];
        const __m256 b = r[j + h];
        r[j] = _mm256_add_ps(a, b);
        r[j + h] = _mm256_sub_ps(a, b);
      }
    }
  }
}

// GCC 12's avx512fintrin.h warns about its own _mm512_undefined_* in the intrinsics the AVX-512
// variants below use.
#pragma GCC diagnostic push
#if !defined(__clang__)  // warning groups clang does not know
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The butterflies of a block of kN reconstructed values in registers, then signs and the clamp to
// fp16's range, into w.
template <uint32_t kN, typename Out>
__attribute__((target("avx2,f16c"), always_inline)) inline void ButterfliesAndStore(__m256* r, const float* signs,
                                                                                    Out* w) {
  ButterfliesInRegisters<kN>(r);
  const __m256 max = _mm256_set1_ps(kFp16Max);
  const __m256 min = _mm256_set1_ps(-kFp16Max);
  for (uint32_t i = 0; i < kN / 8; ++i) {
    const __m256 y = _mm256_mul_ps(r[i], _mm256_loadu_ps(signs + 8 * i));
    Store8(w + 8 * i, _mm256_min_ps(_mm256_max_ps(y, min), max));
  }
}

// One block of kN values from kBits codes at `in`: level * step, butterflies, signs, clamp, into w.
template <uint32_t kN, uint32_t kBits, typename Out>
__attribute__((target("avx2,f16c"), always_inline)) inline void ReconstructBlock(const uint8_t* in, __m256 lv_lo,
                                                                                 __m256 lv_hi, const float* signs,
                                                                                 Out* w) {
  __m256 r[kN / 8];
  for (uint32_t i = 0; i < kN / 8; ++i) {
    // Every group but the block's last has the next group's bytes after it.
    const __m256i q = i + 1 < kN / 8 ? Codes8<kBits, true>(in + i * kBits) : Codes8<kBits>(in + i * kBits);
    r[i] = _mm256_permutevar8x32_ps(lv_lo, q);
    if constexpr (kBits == 4) {
      r[i] = _mm256_blendv_ps(r[i], _mm256_permutevar8x32_ps(lv_hi, q), _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
    }
  }
  ButterfliesAndStore<kN>(r, signs, w);
}

// 4-bit codes with AVX-512: 16 codes at a time through one 16-entry table of levels * step (one
// permute, not two and a blend), then the same butterflies.
template <uint32_t kN, typename Out>
__attribute__((target("avx2,f16c,avx512f"), always_inline)) inline void ReconstructBlockWide(const uint8_t* in,
                                                                                             __m512 lv,
                                                                                             const float* signs,
                                                                                             Out* w) {
  static_assert(kN % 16 == 0);
  __m256 r[kN / 8];
  for (uint32_t i = 0; i < kN / 16; ++i) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + 8 * i));
    const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
    const __m512 y = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(low, high)), lv);
    r[2 * i] = _mm512_castps512_ps256(y);
    r[2 * i + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(y), 1));
  }
  ButterfliesAndStore<kN>(r, signs, w);
}

template <typename Out>
__attribute__((target("avx2,f16c,avx512f"))) bool ReconstructBlockWideOf(uint32_t n, const uint8_t* in, __m256 lv_lo,
                                                                         __m256 lv_hi, const float* signs, Out* w) {
  const __m512 lv =
      _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lv_lo)), _mm256_castps_pd(lv_hi), 1));
  return WithRegisterBlockSize(
      n, [&](auto kN) __attribute__((target("avx2,f16c,avx512f"))) {
        if constexpr (kN == 8) {
          ReconstructBlock<8, 4>(in, lv_lo, lv_hi, signs, w);
        } else {
          ReconstructBlockWide<kN>(in, lv, signs, w);
        }
      });
}

// The codes of 8 values: a binary search over the sorted thresholds (padded with +inf to 16)
// counts those below each value, as the portable path's linear count does.
template <uint32_t kBits>
__attribute__((target("avx2"), always_inline)) inline __m256i Quantise8(__m256 u, __m256 thr_lo, __m256 thr_hi) {
  __m256i q = _mm256_setzero_si256();
  for (uint32_t half = (1u << kBits) / 2; half >= 1; half /= 2) {
    const __m256i probe = _mm256_add_epi32(q, _mm256_set1_epi32(static_cast<int>(half) - 1));
    __m256 t = _mm256_permutevar8x32_ps(thr_lo, probe);
    if constexpr (kBits == 4) {
      t = _mm256_blendv_ps(t, _mm256_permutevar8x32_ps(thr_hi, probe),
                           _mm256_castsi256_ps(_mm256_slli_epi32(probe, 28)));
    }
    const __m256i above = _mm256_castps_si256(_mm256_cmp_ps(u, t, _CMP_GT_OQ));
    q = _mm256_add_epi32(q, _mm256_and_si256(above, _mm256_set1_epi32(static_cast<int>(half))));
  }
  return q;
}

// 8 codes of kBits, LSB first, into kBits bytes at `out`.
template <uint32_t kBits>
__attribute__((target("avx2"), always_inline)) inline void Pack8(__m256i q, uint8_t* out) {
  const __m256i shifts = _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
  const __m256i placed = _mm256_sllv_epi32(q, shifts);
  __m128i w = _mm_or_si128(_mm256_castsi256_si128(placed), _mm256_extracti128_si256(placed, 1));
  w = _mm_or_si128(w, _mm_shuffle_epi32(w, 0x4E));
  w = _mm_or_si128(w, _mm_shuffle_epi32(w, 0xB1));
  const uint32_t word = static_cast<uint32_t>(_mm_cvtsi128_si32(w));
  for (uint32_t k = 0; k < kBits; ++k) out[k] = static_cast<uint8_t>(word >> (8 * k));
}

// One block of kN values from `in` coded straight from registers: signs, butterflies, times
// `factor` (the block's norm over the vector's scale), codes into kN / 8 * kBits bytes at `out`.
template <uint32_t kN, uint32_t kBits, typename In>
__attribute__((target("avx2,f16c"), always_inline)) inline void CodeBlock(const In* in, const float* signs,
                                                                          __m256 factor, __m256 thr_lo, __m256 thr_hi,
                                                                          uint8_t* out) {
  __m256 r[kN / 8];
  for (uint32_t i = 0; i < kN / 8; ++i) r[i] = _mm256_mul_ps(Load8(in + 8 * i), _mm256_loadu_ps(signs + 8 * i));
  ButterfliesInRegisters<kN>(r);
  for (uint32_t i = 0; i < kN / 8; ++i) {
    Pack8<kBits>(Quantise8<kBits>(_mm256_mul_ps(r[i], factor), thr_lo, thr_hi), out + i * kBits);
  }
}

// The AVX-512 variant: the same rotation, then 16 values at a time through one 16-entry
// threshold table (one permute per step of the search instead of two and a blend): the same
// comparisons, so the same codes.
template <uint32_t kBits>
__attribute__((target("avx512f"), always_inline)) inline __m512i Quantise16(__m512 u, __m512 thr) {
  __m512i q = _mm512_setzero_si512();
  for (uint32_t half = (1u << kBits) / 2; half >= 1; half /= 2) {
    const __m512i probe = _mm512_add_epi32(q, _mm512_set1_epi32(static_cast<int>(half) - 1));
    const __mmask16 above = _mm512_cmp_ps_mask(u, _mm512_permutexvar_ps(probe, thr), _CMP_GT_OQ);
    q = _mm512_mask_add_epi32(q, above, q, _mm512_set1_epi32(static_cast<int>(half)));
  }
  return q;
}

// 16 codes of kBits, LSB first, into 2 * kBits bytes at `out`: as bytes, then neighbours merged
// by multiply-adds (2, 3 bits) or a shift (4 bits).
template <uint32_t kBits>
__attribute__((target("avx2,f16c,avx512f"), always_inline)) inline void Pack16(__m512i q, uint8_t* out) {
  const __m128i b = _mm512_cvtepi32_epi8(q);
  if constexpr (kBits == 4) {
    const __m128i pairs = _mm_and_si128(_mm_or_si128(b, _mm_srli_epi16(b, 4)), _mm_set1_epi16(0x00ff));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(pairs, pairs));
  } else if constexpr (kBits == 2) {
    const __m128i pairs = _mm_maddubs_epi16(b, _mm_set1_epi16(0x0401));       // b0 + 4 b1
    const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001));  // + 16 (b2 + 4 b3)
    const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(quads, quads), quads);
    const uint32_t word = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
    std::memcpy(out, &word, 4);
  } else {
    const __m128i pairs = _mm_maddubs_epi16(b, _mm_set1_epi16(0x0801));       // b0 + 8 b1
    const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00400001));  // + 64 (b2 + 8 b3)
    const __m128i eights = _mm_or_si128(quads, _mm_srli_epi64(quads, 20));    // 24 bits per 64-bit lane
    const uint64_t word = (static_cast<uint64_t>(_mm_cvtsi128_si64(eights)) & 0xffffff) |
                          (static_cast<uint64_t>(_mm_extract_epi64(eights, 1)) & 0xffffff) << 24;
    std::memcpy(out, &word, 6);
  }
}

template <uint32_t kN, uint32_t kBits, typename In>
__attribute__((target("avx2,f16c,avx512f"), always_inline)) inline void CodeBlockWide(const In* in, const float* signs,
                                                                                      __m256 factor, __m512 thr,
                                                                                      uint8_t* out) {
  static_assert(kN % 16 == 0);
  __m256 r[kN / 8];
  for (uint32_t i = 0; i < kN / 8; ++i) r[i] = _mm256_mul_ps(Load8(in + 8 * i), _mm256_loadu_ps(signs + 8 * i));
  ButterfliesInRegisters<kN>(r);
  for (uint32_t i = 0; i < kN / 8; i += 2) {
    const __m512 u =
        _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_mul_ps(r[i], factor))),
                                            _mm256_castps_pd(_mm256_mul_ps(r[i + 1], factor)), 1));
    Pack16<kBits>(Quantise16<kBits>(u, thr), out + i * kBits);
  }
}

// CodeBlockOf's AVX-512 variant (blocks of 8 go through the AVX2 one).
template <uint32_t kBits, typename In>
__attribute__((target("avx2,f16c,avx512f"))) bool CodeBlockWideOf(uint32_t n, const In* in, const float* signs,
                                                                  __m256 factor, __m256 thr_lo, __m256 thr_hi,
                                                                  uint8_t* out) {
  const __m512 thr = _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(thr_lo)), _mm256_castps_pd(thr_hi), 1));
  return WithRegisterBlockSize(
      n, [&](auto kN) __attribute__((target("avx2,f16c,avx512f"))) {
        if constexpr (kN == 8) {
          CodeBlock<8, kBits>(in, signs, factor, thr_lo, thr_hi, out);
        } else {
          CodeBlockWide<kN, kBits>(in, signs, factor, thr, out);
        }
      });
}

template <uint32_t kBits, typename In>
__attribute__((target("avx2,f16c"))) bool CodeBlockOf(uint32_t n, const In* in, const float* signs, __m256 factor,
                                                      __m256 thr_lo, __m256 thr_hi, uint8_t* out) {
  return WithRegisterBlockSize(
      n, [&](auto kN)
             __attribute__((target("avx2,f16c"))) { CodeBlock<kN, kBits>(in, signs, factor, thr_lo, thr_hi, out); });
}

#pragma GCC diagnostic pop

// One block of kN values rotated in place: signs, butterflies, norm; acc gets the squares.
template <uint32_t kN>
__attribute__((target("avx2"), always_inline)) inline void RotateBlock(float* w, const float* signs, __m256 norm,
                                                                       __m256* acc) {
  __m256 r[kN / 8];
  for (uint32_t i = 0; i < kN / 8; ++i)
    r[i] = _mm256_mul_ps(_mm256_loadu_ps(w + 8 * i), _mm256_loadu_ps(signs + 8 * i));
  ButterfliesInRegisters<kN>(r);
  for (uint32_t i = 0; i < kN / 8; ++i) {
    const __m256 y = _mm256_mul_ps(r[i], norm);
    _mm256_storeu_ps(w + 8 * i, y);
    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(y, y));
  }
}

__attribute__((target("avx2"))) bool RotateBlockOf(uint32_t n, float* w, const float* signs, __m256 norm, __m256* acc) {
  return WithRegisterBlockSize(
      n, [&](auto kN) __attribute__((target("avx2"))) { RotateBlock<kN>(w, signs, norm, acc); });
}

// ReconstructBlock for a block size and width known only at run time.
template <uint32_t kBits, typename Out>
__attribute__((target("avx2,f16c"))) bool ReconstructBlockOf(uint32_t n, const uint8_t* in, __m256 lv_lo, __m256 lv_hi,
                                                             const float* signs, Out* w) {
  return WithRegisterBlockSize(
      n, [&](auto kN)
             __attribute__((target("avx2,f16c"))) { ReconstructBlock<kN, kBits>(in, lv_lo, lv_hi, signs, w); });
}

#endif

}  // namespace

uint8_t ScaleCode(double rms, float top) {
  if (!(rms > 0) || !(top > 0)) return kZeroVector;
  const double steps = std::round(-16.0 * std::log2(rms / top));
  if (steps > kMaxScaleCode) return kZeroVector;
  return static_cast<uint8_t>(std::max(0.0, steps));
}

float ScaleOf(float top, uint8_t code) {
  if (code == kZeroVector) return 0.0f;
  return top * kScaleSteps[code % 16] * kPowersOfHalf[code / 16];
}

LayerCoder::LayerCoder(uint32_t dim, uint32_t heads, uint32_t bits) : dim_(dim), heads_(heads), bits_(bits) {
  for (uint32_t offset = 0; offset < dim; ++n_blocks_) {
    uint32_t n = 1;
    while (n * 2 <= dim - offset) n *= 2;
    block_offset_[n_blocks_] = offset;
    block_size_[n_blocks_] = n;
    block_norm_[n_blocks_] = 1.0f / std::sqrt(static_cast<float>(n));  // correctly rounded
    offset += n;
  }
  const std::span<const float> half = bits == 2   ? std::span<const float>(kHalf2)
                                      : bits == 3 ? std::span<const float>(kHalf3)
                                                  : std::span<const float>(kHalf4);
  const uint32_t h = static_cast<uint32_t>(half.size());
  n_levels_ = 2 * h;
  for (uint32_t i = 0; i < h; ++i) {
    levels_[h - 1 - i] = -half[i];
    levels_[h + i] = half[i];
  }
  for (uint32_t i = 0; i + 1 < n_levels_; ++i) thresholds_[i] = 0.5f * (levels_[i] + levels_[i + 1]);
  signs_.assign(size_t{heads} * dim, 1.0f);
}

void LayerCoder::SetSigns(uint32_t seed, uint32_t kind, uint32_t layer) {
  // layer < 2^10 and head < 2^10 (kMaxLayers, kMaxKvHeads) fit their fields of the state.
  for (uint32_t h = 0; h < heads_; ++h) {
    SplitMix64 rng(uint64_t{seed} << 32 | uint64_t{kind & 1} << 31 | uint64_t{layer} << 12 | h);
    uint64_t bits = 0;
    for (uint32_t c = 0; c < dim_; ++c) {
      if (c % 64 == 0) bits = rng.Next();
      signs_[size_t{h} * dim_ + c] = (bits >> (c % 64)) & 1 ? -1.0f : 1.0f;
    }
  }
}

void LayerCoder::Rotate(float* x, uint64_t n_vectors, double* rms, VectorIsa isa) const {
  isa = ResolveVectorIsa(isa);
#if defined(__x86_64__)
  if (isa != VectorIsa::kPortable && dim_ % 8 == 0) {
    [&]() __attribute__((target("avx2"))) {
      for (uint64_t vi = 0; vi < n_vectors; ++vi) {
        float* v = x + vi * dim_;
        const float* s = signs_.data() + (vi % heads_) * dim_;
        __m256 acc = _mm256_setzero_ps();
        for (uint32_t b = 0; b < n_blocks_; ++b) {
          const uint32_t offset = block_offset_[b], n = block_size_[b];
          float* w = v + offset;
          const float* ws = s + offset;
          const __m256 norm = _mm256_set1_ps(block_norm_[b]);
          if (RotateBlockOf(n, w, ws, norm, &acc)) continue;
          for (uint32_t j = 0; j < n; j += 8)  // blocks over 128: through memory
            _mm256_storeu_ps(w + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(ws + j)));
          ButterfliesAvx2(w, n);
          for (uint32_t j = 0; j < n; j += 8) {
            const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(w + j), norm);
            _mm256_storeu_ps(w + j, y);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(y, y));
          }
        }
        float partial[8];
        _mm256_storeu_ps(partial, acc);
        rms[vi] = RmsOfPartials(partial, dim_);
      }
    }
    ();
    return;
  }
#endif
  for (uint64_t vi = 0; vi < n_vectors; ++vi) {
    float* v = x + vi * dim_;
    const float* s = signs_.data() + (vi % heads_) * dim_;
    for (uint32_t c = 0; c < dim_; ++c) v[c] *= s[c];
    float partial[8] = {};
    for (uint32_t b = 0; b < n_blocks_; ++b) {
      float* w = v + block_offset_[b];
      Butterflies(w, block_size_[b]);
      for (uint32_t j = 0; j < block_size_[b]; ++j) w[j] *= block_norm_[b];
    }
    for (uint32_t c = 0; c < dim_; ++c) partial[c % 8] += v[c] * v[c];
    rms[vi] = RmsOfPartials(partial, dim_);
  }
}

template <typename In>
uint16_t LayerCoder::CodeFrom(const In* in, uint64_t n_vectors, uint8_t* scale_codes, uint8_t* codes,
                              VectorIsa isa) const {
  isa = ResolveVectorIsa(isa);
  bool vector = false;
#if defined(__x86_64__)
  vector = isa != VectorIsa::kPortable && dim_ % 8 == 0;
#endif
  // Each vector's RMS from its values (squares summed in fp32 into 8 partial sums, value c into
  // c mod 8, in order; the partial sums in double), then the layer's top and the scale codes.
  std::vector<double> rms(n_vectors);
  if (vector) {
#if defined(__x86_64__)
    [&]() __attribute__((target("avx2,f16c"))) {
      for (uint64_t vi = 0; vi < n_vectors; ++vi) {
        const In* u = in + vi * dim_;
        __m256 acc = _mm256_setzero_ps();
        for (uint32_t c = 0; c < dim_; c += 8) {
          const __m256 v = Load8(u + c);
          acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
        }
        float partial[8];
        _mm256_storeu_ps(partial, acc);
        rms[vi] = RmsOfPartials(partial, dim_);
      }
    }
    ();
#endif
  } else {
    for (uint64_t vi = 0; vi < n_vectors; ++vi) {
      const In* u = in + vi * dim_;
      float partial[8] = {};
      for (uint32_t c = 0; c < dim_; ++c) {
        const float v = ToFloat(u[c]);
        partial[c % 8] += v * v;
      }
      rms[vi] = RmsOfPartials(partial, dim_);
    }
  }
  const double largest = n_vectors ? *std::max_element(rms.begin(), rms.end()) : 0.0;
  // The RMS of fp16-range values is within it, but for the rounding of the sum.
  const uint16_t top_h = Fp32ToFp16Up(std::min(static_cast<float>(largest), kFp16Max));
  const float top = Fp16ToFp32(top_h);
  for (uint64_t vi = 0; vi < n_vectors; ++vi) scale_codes[vi] = ScaleCode(rms[vi], top);

  // The codes: each vector rotated (unnormalised) and multiplied by its block's norm over its
  // scale, one product per value in both paths.
  if (vector) {
#if defined(__x86_64__)
    auto code_all = [&](auto bits_tag, auto wide_tag) __attribute__((target("avx2,f16c"))) {
      constexpr uint32_t kBits = decltype(bits_tag)::value;
      constexpr bool kWide = decltype(wide_tag)::value;
      std::array<float, 16> padded;  // thresholds, then +inf
      padded.fill(std::numeric_limits<float>::infinity());
      std::copy_n(thresholds_.begin(), n_levels_ - 1, padded.begin());
      const __m256 thr_lo = _mm256_loadu_ps(padded.data());
      const __m256 thr_hi = _mm256_loadu_ps(padded.data() + 8);
      std::vector<float> scratch(block_size_[0] > 128 ? block_size_[0] : 0);  // blocks over 128
      uint8_t* out = codes;
      for (uint64_t vi = 0; vi < n_vectors; ++vi) {
        const float scale = ScaleOf(top, scale_codes[vi]);
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        const In* u = in + vi * dim_;
        const float* s = signs_.data() + (vi % heads_) * dim_;
        for (uint32_t b = 0; b < n_blocks_; ++b) {
          const uint32_t n = block_size_[b], offset = block_offset_[b];
          const __m256 factor = _mm256_set1_ps(block_norm_[b] * inv);
          const bool done = kWide ? CodeBlockWideOf<kBits>(n, u + offset, s + offset, factor, thr_lo, thr_hi, out)
                                  : CodeBlockOf<kBits>(n, u + offset, s + offset, factor, thr_lo, thr_hi, out);
          if (!done) {
            float* w = scratch.data();
            for (uint32_t j = 0; j < n; j += 8)
              _mm256_storeu_ps(w + j, _mm256_mul_ps(Load8(u + offset + j), _mm256_loadu_ps(s + offset + j)));
            ButterfliesAvx2(w, n);
            for (uint32_t j = 0; j < n; j += 8)
              Pack8<kBits>(Quantise8<kBits>(_mm256_mul_ps(_mm256_loadu_ps(w + j), factor), thr_lo, thr_hi),
                           out + j / 8 * kBits);
          }
          out += n / 8 * kBits;
        }
      }
    };
    auto with_bits = [&](auto wide_tag) {
      if (bits_ == 2) code_all(std::integral_constant<uint32_t, 2>{}, wide_tag);
      if (bits_ == 3) code_all(std::integral_constant<uint32_t, 3>{}, wide_tag);
      if (bits_ == 4) code_all(std::integral_constant<uint32_t, 4>{}, wide_tag);
    };
    if (isa == VectorIsa::kAvx512) {
      with_bits(std::true_type{});
    } else {
      with_bits(std::false_type{});
    }
#endif
    return top_h;
  }
  std::vector<float> v(dim_);
  uint64_t acc = 0;
  uint32_t filled = 0;
  uint8_t* out = codes;
  for (uint64_t vi = 0; vi < n_vectors; ++vi) {
    const float scale = ScaleOf(top, scale_codes[vi]);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    const In* u = in + vi * dim_;
    const float* s = signs_.data() + (vi % heads_) * dim_;
    for (uint32_t c = 0; c < dim_; ++c) v[c] = ToFloat(u[c]) * s[c];
    for (uint32_t b = 0; b < n_blocks_; ++b) {
      float* w = v.data() + block_offset_[b];
      Butterflies(w, block_size_[b]);
      const float factor = block_norm_[b] * inv;
      for (uint32_t j = 0; j < block_size_[b]; ++j) {
        const float x = w[j] * factor;
        uint32_t q = 0;
        for (uint32_t t = 0; t + 1 < n_levels_; ++t) q += x > thresholds_[t] ? 1u : 0u;
        acc |= uint64_t{q} << filled;
        filled += bits_;
        while (filled >= 8) {
          *out++ = static_cast<uint8_t>(acc);
          acc >>= 8;
          filled -= 8;
        }
      }
    }
  }
  if (filled > 0) *out = static_cast<uint8_t>(acc);
  return top_h;
}

uint16_t LayerCoder::Code(const float* x, uint64_t n_vectors, uint8_t* scale_codes, uint8_t* codes,
                          VectorIsa isa) const {
  return CodeFrom(x, n_vectors, scale_codes, codes, isa);
}

uint16_t LayerCoder::CodeFp16(const uint16_t* x, uint64_t n_vectors, uint8_t* scale_codes, uint8_t* codes,
                              VectorIsa isa) const {
  return CodeFrom(x, n_vectors, scale_codes, codes, isa);
}

template <typename Out>
void LayerCoder::ReconstructInto(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top,
                                 Out* x, VectorIsa isa) const {
  isa = ResolveVectorIsa(isa);
#if defined(__x86_64__)
  if (isa != VectorIsa::kPortable && dim_ % 8 == 0) {
    [&]() __attribute__((target("avx2,f16c"))) {
      const bool wide = isa == VectorIsa::kAvx512;
      const __m256 levels_lo = _mm256_loadu_ps(levels_.data());
      const __m256 levels_hi = _mm256_loadu_ps(levels_.data() + 8);
      const __m256 max = _mm256_set1_ps(kFp16Max);
      const __m256 min = _mm256_set1_ps(-kFp16Max);
      // Blocks over 128 go through memory, one at a time.
      std::vector<float> scratch(block_size_[0] > 128 ? block_size_[0] : 0);
      const uint8_t* in = codes;
      for (uint64_t vi = 0; vi < n_vectors; ++vi) {
        const float scale = ScaleOf(top, scale_codes[vi]);
        Out* v = x + vi * dim_;
        const float* s = signs_.data() + (vi % heads_) * dim_;
        for (uint32_t b = 0; b < n_blocks_; ++b) {
          const uint32_t n = block_size_[b], offset = block_offset_[b];
          const __m256 step = _mm256_set1_ps(scale * block_norm_[b]);
          const __m256 lv_lo = _mm256_mul_ps(levels_lo, step);
          const __m256 lv_hi = _mm256_mul_ps(levels_hi, step);
          const bool done = bits_ == 2   ? ReconstructBlockOf<2>(n, in, lv_lo, lv_hi, s + offset, v + offset)
                            : bits_ == 3 ? ReconstructBlockOf<3>(n, in, lv_lo, lv_hi, s + offset, v + offset)
                            : wide       ? ReconstructBlockWideOf(n, in, lv_lo, lv_hi, s + offset, v + offset)
                                         : ReconstructBlockOf<4>(n, in, lv_lo, lv_hi, s + offset, v + offset);
          if (!done) {
            float* w = scratch.data();
            for (uint32_t j = 0; j < n; j += 8) {
              const __m256i q = bits_ == 2   ? Codes8<2>(in + j / 8 * 2)
                                : bits_ == 3 ? Codes8<3>(in + j / 8 * 3)
                                             : Codes8<4>(in + j / 8 * 4);
              const __m256 upper = _mm256_permutevar8x32_ps(lv_hi, q);
              const __m256 y = _mm256_permutevar8x32_ps(lv_lo, q);
              _mm256_storeu_ps(
                  w + j, bits_ == 4 ? _mm256_blendv_ps(y, upper, _mm256_castsi256_ps(_mm256_slli_epi32(q, 28))) : y);
            }
            ButterfliesAvx2(w, n);
            for (uint32_t j = 0; j < n; j += 8) {
              const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(s + offset + j));
              Store8(v + offset + j, _mm256_min_ps(_mm256_max_ps(y, min), max));
            }
          }
          in += n / 8 * bits_;
        }
        if (scale == 0) std::fill_n(v, dim_, Out{0});  // +0, not the -0 of a negative level times 0
      }
    }
    ();
    return;
  }
#endif
  uint64_t acc = 0;
  uint32_t filled = 0;
  const uint8_t* in = codes;
  const uint32_t mask = (1u << bits_) - 1;
  std::array<float, 16> lv{};
  std::vector<float> v(dim_);
  for (uint64_t vi = 0; vi < n_vectors; ++vi) {
    const float scale = ScaleOf(top, scale_codes[vi]);
    for (uint32_t b = 0; b < n_blocks_; ++b) {
      const float step = scale * block_norm_[b];
      for (uint32_t k = 0; k < n_levels_; ++k) lv[k] = levels_[k] * step;
      float* w = v.data() + block_offset_[b];
      for (uint32_t j = 0; j < block_size_[b]; ++j) {
        while (filled < bits_) {
          acc |= uint64_t{*in++} << filled;
          filled += 8;
        }
        w[j] = lv[acc & mask];
        acc >>= bits_;
        filled -= bits_;
      }
      Butterflies(w, block_size_[b]);
    }
    const float* s = signs_.data() + (vi % heads_) * dim_;
    Out* out = x + vi * dim_;
    for (uint32_t c = 0; c < dim_; ++c)
      out[c] = FromFloat<Out>(scale == 0 ? 0.0f : std::clamp(v[c] * s[c], -kFp16Max, kFp16Max));
  }
}

void LayerCoder::Reconstruct(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top, float* x,
                             VectorIsa isa) const {
  ReconstructInto(codes, n_vectors, scale_codes, top, x, isa);
}

void LayerCoder::ReconstructFp16(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top,
                                 uint16_t* x, VectorIsa isa) const {
  ReconstructInto(codes, n_vectors, scale_codes, top, x, isa);
}

bool LayerCoder::PaddingIsZero(const uint8_t* codes, uint64_t n_vectors) const {
  const uint64_t bits = n_vectors * dim_ * bits_;
  if (bits % 8 == 0) return true;
  return (codes[bits / 8] >> (bits % 8)) == 0;
}

}  // namespace kvc::rotquant
