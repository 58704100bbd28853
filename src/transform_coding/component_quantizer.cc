#include "transform_coding/component_quantizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/half.h"

namespace kvc {
namespace {

// Max (1960), "Quantizing for minimum distortion", optimum uniform quantiser steps for a unit
// Gaussian with 2, 4, ..., 256 levels; component_quantizer_test re-derives them numerically.
constexpr std::array<float, 9> kGaussianStep = {0.0f,    1.5956f, 0.9957f, 0.5860f, 0.3352f,
                                                0.1881f, 0.1041f, 0.0569f, 0.0308f};

constexpr uint16_t kFp16Max = 0x7bff;
constexpr uint16_t kFirstBadScale = 0x7c00;  // +inf, NaN and every negative pattern are >= this

// The multiplier grid: 2^(k/8) for k = -8..8, 0.5 .. 2.0.
constexpr int kGridLo = -8, kGridHi = 8;

inline float StepOf(uint16_t scale_fp16, uint32_t bits, float multiplier) {
  return Fp16ToFp32(scale_fp16) * kGaussianStep[bits] * multiplier;
}

// The reconstruction level of code 0 in steps: 0.5 - L/2 (exact in fp32).
inline float FirstLevel(uint32_t bits) { return 0.5f - static_cast<float>(1u << (bits - 1)); }

// clamp(floor(x * inv_step) + L/2, 0, L - 1), written without floor() (a libm call without
// SSE4.1) so that the quantiser's loop vectorises: x * inv_step is first clamped to
// [-L/2 - 1, L/2], which changes no result (anything beyond lands on the same end level) and
// keeps the integer conversion in range; truncation then minus one where it rounded up is floor.
inline uint8_t CodeOf(float x, float inv_step, uint32_t bits) {
  const int32_t half_levels = 1 << (bits - 1);
  const int32_t top = (1 << bits) - 1;
  const float lo = static_cast<float>(-half_levels - 1), hi = static_cast<float>(half_levels);
  float y = x * inv_step;
  y = y < lo ? lo : y;
  y = y > hi ? hi : y;
  int32_t level = static_cast<int32_t>(y);
  level -= static_cast<float>(level) > y ? 1 : 0;
  level += half_levels;
  level = level < 0 ? 0 : level;
  level = level > top ? top : level;
  return static_cast<uint8_t>(level);
}

// DequantizeComponent for contiguous output, the decoder's case. The strided loop does not
// vectorise (its stride is a runtime value), and gcc leaves the u8 -> f32 conversion scalar at
// -O2, so x86-64 gets SSE2 (part of its baseline) by hand. Every lane computes exactly what the
// scalar tail does, (code + first) * step: the sum is exact and the product rounds once.
inline void DequantizeContiguous(const uint8_t* __restrict codes, uint32_t n, float first, float step,
                                 float* __restrict out) {
  uint32_t t = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  const __m128 first4 = _mm_set1_ps(first), step4 = _mm_set1_ps(step);
  auto put4 = [&](__m128i c32, float* dst) {
    _mm_storeu_ps(dst, _mm_mul_ps(_mm_add_ps(_mm_cvtepi32_ps(c32), first4), step4));
  };
  for (; t + 16 <= n; t += 16) {
    const __m128i c8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + t));
    const __m128i lo = _mm_unpacklo_epi8(c8, zero);
    const __m128i hi = _mm_unpackhi_epi8(c8, zero);
    put4(_mm_unpacklo_epi16(lo, zero), out + t);
    put4(_mm_unpackhi_epi16(lo, zero), out + t + 4);
    put4(_mm_unpacklo_epi16(hi, zero), out + t + 8);
    put4(_mm_unpackhi_epi16(hi, zero), out + t + 12);
  }
#endif
  for (; t < n; ++t) out[t] = (static_cast<float>(codes[t]) + first) * step;
}

// OR of n codes, 16 at a time, so the hostile-input check costs little: a code >= 2^bits shows
// as a high bit. By hand for SSE2: gcc -O3 unrolls the portable byte-lane form into stack spills.
uint32_t OrOfCodes(const uint8_t* codes, size_t n) {
  size_t i = 0;
  uint32_t all = 0;
#if defined(__SSE2__)
  __m128i acc = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) acc = _mm_or_si128(acc, _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
  acc = _mm_or_si128(acc, _mm_srli_si128(acc, 8));
  acc = _mm_or_si128(acc, _mm_srli_si128(acc, 4));
  acc = _mm_or_si128(acc, _mm_srli_si128(acc, 2));
  acc = _mm_or_si128(acc, _mm_srli_si128(acc, 1));
  all = static_cast<uint32_t>(_mm_cvtsi128_si32(acc)) & 0xff;
#endif
  for (; i < n; ++i) all |= codes[i];
  return all;
}

bool ShapesValid(uint32_t n_coeffs, std::span<const uint8_t> bits, std::span<const float> multipliers) {
  if (bits.size() != n_coeffs || multipliers.size() < size_t{kKvtcWidths} * n_coeffs) return false;
  return std::all_of(bits.begin(), bits.end(), [](uint8_t b) { return b <= kMaxQuantBits; });
}

}  // namespace

float GaussianStep(uint32_t bits) { return bits <= kMaxQuantBits ? kGaussianStep[bits] : 0.0f; }

uint16_t ComponentScale(const float* x, size_t stride, uint32_t n) {
  if (n == 0) return 0;
  // Four partial sums: independent additions the CPU overlaps (one chain is latency-bound).
  double sum[4] = {0, 0, 0, 0};
  uint32_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for (uint32_t k = 0; k < 4; ++k) sum[k] += double{x[(t + k) * stride]} * x[(t + k) * stride];
  }
  for (; t < n; ++t) sum[0] += double{x[t * stride]} * x[t * stride];
  const double rms = std::sqrt((sum[0] + sum[1] + sum[2] + sum[3]) / n);
  if (!(rms < 65504.0)) return kFp16Max;
  return Fp32ToFp16(static_cast<float>(rms));
}

void QuantizeComponent(const float* x, size_t stride, uint32_t n, uint32_t bits, uint16_t scale_fp16, float multiplier,
                       uint8_t* codes) {
  assert(bits >= 1 && bits <= kMaxQuantBits);
  const float step = StepOf(scale_fp16, bits, multiplier);
  if (!(step > 0.0f)) {
    std::fill_n(codes, n, static_cast<uint8_t>(1u << (bits - 1)));
    return;
  }
  const float inv = 1.0f / step;
  for (uint32_t t = 0; t < n; ++t) codes[t] = CodeOf(x[t * stride], inv, bits);
}

void DequantizeComponent(const uint8_t* codes, uint32_t n, uint32_t bits, uint16_t scale_fp16, float multiplier,
                         float* out, size_t stride) {
  assert(bits >= 1 && bits <= kMaxQuantBits);
  const float step = StepOf(scale_fp16, bits, multiplier);
  // (code - L/2 + 0.5) * step: the level index is exact in fp32, one rounding in the product.
  const float first = FirstLevel(bits);
  if (stride == 1) {
    DequantizeContiguous(codes, n, first, step, out);
    return;
  }
  for (uint32_t t = 0; t < n; ++t) out[t * stride] = (static_cast<float>(codes[t]) + first) * step;
}

void QuantizeComponentBlock(const float* coeffs, uint32_t n_tokens, uint32_t n_coeffs, std::span<const uint8_t> bits,
                            std::span<const float> multipliers, QuantizedBlock* out) {
  out->codes.clear();
  out->scales.clear();
  if (!ShapesValid(n_coeffs, bits, multipliers)) {
    assert(false && "QuantizeComponentBlock: allocation does not match n_coeffs");
    return;
  }
  const size_t kept = static_cast<size_t>(std::count_if(bits.begin(), bits.end(), [](uint8_t b) { return b > 0; }));
  out->codes.resize(kept * n_tokens);
  out->scales.resize(kept);
  uint8_t* codes = out->codes.data();
  uint16_t* scales = out->scales.data();
  for (uint32_t c = 0; c < n_coeffs; ++c) {
    const uint32_t b = bits[c];
    if (b == 0) continue;
    const float* x = coeffs + size_t{c} * n_tokens;
    const uint16_t s = ComponentScale(x, 1, n_tokens);
    QuantizeComponent(x, 1, n_tokens, b, s, multipliers[size_t{c} * kKvtcWidths + b - 1], codes);
    *scales++ = s;
    codes += n_tokens;
  }
}

namespace {

// Checks a block's codes and scales as DequantizeComponentBlock promises, then calls
// fn(c, first, step, codes) for each component with bits > 0, in order.
template <typename Fn>
Status ForEachCodedComponent(std::span<const uint8_t> in_codes, std::span<const uint16_t> in_scales, uint32_t n_tokens,
                             uint32_t n_coeffs, std::span<const uint8_t> bits, std::span<const float> multipliers,
                             Fn&& fn) {
  if (!ShapesValid(n_coeffs, bits, multipliers)) {
    return InvalidArgument(
        FormatMessage("kvtc allocation of %zu widths (max 8 bits) does not fit %u components", bits.size(), n_coeffs));
  }
  const size_t kept = static_cast<size_t>(std::count_if(bits.begin(), bits.end(), [](uint8_t b) { return b > 0; }));
  KVC_CHECK_CORRUPT(in_codes.size() == kept * n_tokens, "kvtc block holds %zu codes, expected %zu", in_codes.size(),
                    kept * n_tokens);
  KVC_CHECK_CORRUPT(in_scales.size() == kept, "kvtc block holds %zu scales, expected %zu", in_scales.size(), kept);
  const uint8_t* codes = in_codes.data();
  const uint16_t* scales = in_scales.data();
  for (uint32_t c = 0; c < n_coeffs; ++c) {
    const uint32_t b = bits[c];
    if (b == 0) continue;
    KVC_CHECK_CORRUPT(*scales < kFirstBadScale, "kvtc component %u: the scale is negative, inf or NaN", c);
    KVC_CHECK_CORRUPT((OrOfCodes(codes, n_tokens) >> b) == 0, "kvtc component %u: a code does not fit in %u bits", c,
                      b);
    fn(c, FirstLevel(b), StepOf(*scales, b, multipliers[size_t{c} * kKvtcWidths + b - 1]), codes);
    ++scales;
    codes += n_tokens;
  }
  return Status::Ok();
}

}  // namespace

Status DequantizeComponentBlock(const QuantizedBlock& in, uint32_t n_tokens, uint32_t n_coeffs,
                                std::span<const uint8_t> bits, std::span<const float> multipliers, float* coeffs) {
  RETURN_IF_ERROR(ForEachCodedComponent(in.codes, in.scales, n_tokens, n_coeffs, bits, multipliers,
                                        [&](uint32_t c, float first, float step, const uint8_t* codes) {
                                          DequantizeContiguous(codes, n_tokens, first, step,
                                                               coeffs + size_t{c} * n_tokens);
                                        }));
  for (uint32_t c = 0; c < n_coeffs; ++c) {
    if (bits[c] == 0) std::fill_n(coeffs + size_t{c} * n_tokens, n_tokens, 0.0f);
  }
  return Status::Ok();
}

Status CodedComponentBlock(std::span<const uint8_t> codes, std::span<const uint16_t> scales, uint32_t n_tokens,
                           uint32_t n_coeffs, std::span<const uint8_t> bits, std::span<const float> multipliers,
                           std::vector<CodedComponent>* coded) {
  coded->clear();
  return ForEachCodedComponent(
      codes, scales, n_tokens, n_coeffs, bits, multipliers,
      [&](uint32_t c, float first, float step, const uint8_t* component_codes) {
        coded->push_back({.component = c, .first = first, .step = step, .codes = component_codes});
      });
}

ComponentStats MeasureComponent(const float* x, size_t stride, uint32_t n, uint32_t chunk_tokens) {
  ComponentStats stats;
  stats.multipliers.fill(1.0f);
  if (n == 0 || chunk_tokens == 0) return stats;
  const uint32_t n_chunks = (n + chunk_tokens - 1) / chunk_tokens;
  std::vector<uint16_t> scale(n_chunks);
  for (uint32_t k = 0; k < n_chunks; ++k) {
    const uint32_t len = std::min(chunk_tokens, n - k * chunk_tokens);
    scale[k] = ComponentScale(x + size_t{k} * chunk_tokens * stride, stride, len);
  }
  for (uint32_t t = 0; t < n; ++t) stats.error[0] += double{x[t * stride]} * x[t * stride];

  std::vector<uint32_t> histogram;
  for (uint32_t b = 1; b <= kMaxQuantBits; ++b) {
    double best_error = -1;
    for (int g = kGridLo; g <= kGridHi; ++g) {
      const float m = std::exp2(static_cast<float>(g) / 8.0f);
      double error = 0;
      for (uint32_t k = 0; k < n_chunks; ++k) {
        const uint32_t t0 = k * chunk_tokens, len = std::min(chunk_tokens, n - t0);
        const float step = StepOf(scale[k], b, m);
        if (!(step > 0.0f)) continue;  // all zero: exact
        const float inv = 1.0f / step, first = 0.5f - static_cast<float>(1u << (b - 1));
        for (uint32_t t = t0; t < t0 + len; ++t) {
          const float v = x[t * stride];
          const double d = double{v} - (static_cast<float>(CodeOf(v, inv, b)) + first) * step;
          error += d * d;
        }
      }
      if (best_error < 0 || error < best_error) {
        best_error = error;
        stats.multipliers[b - 1] = m;
      }
    }
    stats.error[b] = best_error;
    // Entropy of the codes at the chosen multiplier.
    histogram.assign(size_t{1} << b, 0);
    for (uint32_t k = 0; k < n_chunks; ++k) {
      const uint32_t t0 = k * chunk_tokens, len = std::min(chunk_tokens, n - t0);
      const float step = StepOf(scale[k], b, stats.multipliers[b - 1]);
      for (uint32_t t = t0; t < t0 + len; ++t) {
        ++histogram[step > 0.0f ? CodeOf(x[t * stride], 1.0f / step, b) : (1u << (b - 1))];
      }
    }
    double h = 0;
    for (uint32_t count : histogram) {
      if (count == 0) continue;
      const double p = static_cast<double>(count) / n;
      h -= count * std::log2(p);
    }
    stats.entropy_bits[b] = h / n;
  }
  const double inv = 1.0 / n;
  for (double& e : stats.error) e *= inv;
  return stats;
}

}  // namespace kvc
