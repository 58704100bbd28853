#include "base/half.h"

#include <algorithm>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace kvc {
namespace {

#if defined(__x86_64__)
// The F16C instructions convert 8 values at a time with the same round-to-nearest-even as the
// scalar code; the scalar code stays for other CPUs and for the tails. Decoders convert every
// value they produce, so this is on every codec's hot path.
// CPUID leaf 1, ECX: AVX (bit 28), F16C (bit 29), and OSXSAVE (bit 27) so the OS saves the
// AVX registers. (clang 14 does not know "f16c" for __builtin_cpu_supports.)
bool HasF16c() {
  static const bool has = [] {
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    return (c & (1u << 27)) != 0 && (c & (1u << 28)) != 0 && (c & (1u << 29)) != 0;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) size_t Fp16ToFp32F16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t Fp32ToFp16F16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}

// min(hi, max(lo, x)) returns x when it is NaN (as std::clamp and ClampToFp16Range do).
__attribute__((target("avx,f16c"))) size_t Fp32ToFp16ClampedF16c(const float* in, uint16_t* out, size_t n) {
  const __m256 lo = _mm256_set1_ps(-65504.0f), hi = _mm256_set1_ps(65504.0f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(in + i)));
    const __m256 b = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(in + i + 8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8), _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(in + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

// The same clamp and conversion 16 values at a time (VCVTPS2PH on a zmm register is AVX-512F).
// (GCC 12's avx512fintrin.h warns about its own _mm512_undefined_* in the intrinsics.)
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC warning group clang does not know
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) size_t Fp32ToFp16ClampedAvx512(const float* in, uint16_t* out, size_t n) {
  const __m512 lo = _mm512_set1_ps(-65504.0f), hi = _mm512_set1_ps(65504.0f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_loadu_ps(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void Fp16ToFp32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = Fp16ToFp32F16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = Fp16ToFp32(in[i]);
}

void Fp32ToFp16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasF16c()) i = Fp32ToFp16F16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = Fp32ToFp16(in[i]);
}

void ClampToFp16Range(float* x, size_t n) {
  constexpr float kMax = 65504.0f;
  size_t i = 0;
#if defined(__x86_64__)
  // SSE is part of x86-64. max(lo, x) and min(hi, x) return x when it is NaN, as std::clamp does.
  const __m128 lo = _mm_set1_ps(-kMax), hi = _mm_set1_ps(kMax);
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_min_ps(hi, _mm_max_ps(lo, _mm_loadu_ps(x + i))));
#endif
  for (; i < n; ++i) x[i] = std::clamp(x[i], -kMax, kMax);
}

void Fp32ToFp16Clamped(const float* in, uint16_t* out, size_t n, VectorIsa isa) {
  size_t i = 0;
#if defined(__x86_64__)
  if (isa != VectorIsa::kPortable) {
    if (ResolveVectorIsa(isa) == VectorIsa::kAvx512) i = Fp32ToFp16ClampedAvx512(in, out, n);
    // F16C comes with every AVX2 CPU and with some before it (which run kAuto as kPortable).
    if (HasF16c()) i += Fp32ToFp16ClampedF16c(in + i, out + i, n - i);
  }
#endif
  for (; i < n; ++i) out[i] = Fp32ToFp16Clamped(in[i]);
}

void Bf16ToFp32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(in[i]);
}
void Fp32ToBf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp32ToBf16(in[i]);
}

}  // namespace kvc
