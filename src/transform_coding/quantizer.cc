#include "transform_coding/quantizer.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/half.h"

namespace kvc {
namespace {

constexpr uint32_t kFp16MaxAsFp32Bits = 0x477fe000;  // 65504.0f
constexpr uint16_t kFp16Max = 0x7bff;
// fp16 patterns at or above this are +inf, NaN or carry the sign bit: never a valid scale.
constexpr uint16_t kFirstBadScale = 0x7c00;

// step / M = 2 / 2^bits, exact powers of two.
constexpr std::array<float, 9> kStepPerM = {0.0f, 1.0f, 0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f};

// Largest |x| compared as integer bit patterns: for non-negative floats the order is the same,
// NaN sorts above inf (so it saturates the scale instead of being skipped or not depending on
// where it sits), and the result cannot depend on evaluation order.
uint32_t MaxAbsBits(const float* x, uint32_t n) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    b &= 0x7fffffff;
    m = b > m ? b : m;
  }
  return m;
}

// The smallest fp16 not below the group's largest magnitude, capped at the largest finite fp16.
uint16_t ScaleOf(const float* x, uint32_t n) {
  const uint32_t bits = MaxAbsBits(x, n);
  if (bits >= kFp16MaxAsFp32Bits) return kFp16Max;
  float m;
  std::memcpy(&m, &bits, 4);
  return Fp32ToFp16Up(m);
}

// x^ = code * step + offset, offset = step/2 - M: algebraically the documented
// -M + (code + 0.5) * step, and every intermediate is exact in fp32 (see quantizer.h).
struct Dequantiser {
  float step;
  float offset;
};

inline Dequantiser MakeDequantiser(float m, uint32_t bits) {
  const float step = m * kStepPerM[bits];
  return {step, 0.5f * step - m};
}

// Writes the codes of x against scale m > 0.
void QuantiseValues(const float* __restrict x, uint32_t n, uint32_t bits, float m, uint8_t* __restrict codes) {
  const float step = m * kStepPerM[bits];
  const float top = static_cast<float>((1u << bits) - 1);
  for (uint32_t i = 0; i < n; ++i) {
    // x + m >= 0 for |x| <= m (rounding is monotone), so truncation is floor; the compares are
    // ordered so NaN lands on 0 and |x| > m (only past fp16 range) clips.
    float t = (x[i] + m) / step;
    t = t > 0.0f ? t : 0.0f;
    t = t < top ? t : top;
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(t));
  }
}

// The decode loop. gcc 12 at -O2 (the dev preset) leaves the u8 -> f32 conversion scalar, so
// x86-64 gets SSE2 (part of its baseline) by hand; the plain loop stays for other targets and
// the tail. Both give identical results: code * step + offset is exact in fp32, so neither the
// rounding order nor FMA contraction can change it.
inline void DequantiseRun(const uint8_t* __restrict codes, uint32_t n, Dequantiser q, float* __restrict out) {
  uint32_t i = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  const __m128 step = _mm_set1_ps(q.step);
  const __m128 offset = _mm_set1_ps(q.offset);
  auto put4 = [&](__m128i c32, float* dst) {
    _mm_storeu_ps(dst, _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(c32), step), offset));
  };
  for (; i + 16 <= n; i += 16) {
    const __m128i c8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    const __m128i lo = _mm_unpacklo_epi8(c8, zero);
    const __m128i hi = _mm_unpackhi_epi8(c8, zero);
    put4(_mm_unpacklo_epi16(lo, zero), out + i);
    put4(_mm_unpackhi_epi16(lo, zero), out + i + 4);
    put4(_mm_unpacklo_epi16(hi, zero), out + i + 8);
    put4(_mm_unpackhi_epi16(hi, zero), out + i + 12);
  }
  if (i + 8 <= n) {
    const __m128i lo = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)), zero);
    put4(_mm_unpacklo_epi16(lo, zero), out + i);
    put4(_mm_unpackhi_epi16(lo, zero), out + i + 4);
    i += 8;
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(codes[i]) * q.step + q.offset;
}

// Fp16ToFp32 for a validated scale (positive, finite) without its subnormal loop, so a group's
// scales convert in one branch-free pass. Subnormals are mantissa * 2^-24, exact in fp32.
inline float ScaleToFloat(uint16_t h) {
  const uint32_t normal_bits = (static_cast<uint32_t>(h) << 13) + ((127 - 15) << 23);
  float normal;
  std::memcpy(&normal, &normal_bits, 4);
  const float subnormal = static_cast<float>(h & 0x3ff) * 0x1p-24f;
  return (h & 0x7c00) != 0 ? normal : subnormal;
}

// OR of all codes, in fixed chunks so it vectorises at -O2: a code >= 2^bits shows as a high bit.
uint32_t OrOfCodes(const uint8_t* __restrict codes, size_t n) {
  uint8_t lanes[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t j = 0; j < 16; ++j) lanes[j] |= codes[i + j];
  }
  uint32_t all = 0;
  for (uint8_t v : lanes) all |= v;
  for (; i < n; ++i) all |= codes[i];
  return all;
}

bool BitsValid(uint32_t n_coeffs, uint32_t group_size, std::span<const uint8_t> bits) {
  if (group_size == 0 || bits.size() != NumQuantGroups(n_coeffs, group_size)) return false;
  return std::all_of(bits.begin(), bits.end(), [](uint8_t b) { return b <= kMaxQuantBits; });
}

}  // namespace

void QuantizeGroup(const float* x, uint32_t n, uint32_t bits, uint8_t* codes, uint16_t* scale_fp16) {
  assert(bits >= 1 && bits <= kMaxQuantBits);
  const uint16_t h = ScaleOf(x, n);
  *scale_fp16 = h;
  const float m = Fp16ToFp32(h);
  if (m == 0.0f) {
    std::fill_n(codes, n, static_cast<uint8_t>(1u << (bits - 1)));
    return;
  }
  QuantiseValues(x, n, bits, m, codes);
}

void DequantizeGroup(const uint8_t* codes, uint32_t n, uint32_t bits, uint16_t scale_fp16, float* out) {
  assert(bits >= 1 && bits <= kMaxQuantBits);
  DequantiseRun(codes, n, MakeDequantiser(Fp16ToFp32(scale_fp16), bits), out);
}

uint32_t NumQuantGroups(uint32_t n_coeffs, uint32_t group_size) {
  return group_size == 0 ? 0 : static_cast<uint32_t>((uint64_t{n_coeffs} + group_size - 1) / group_size);
}

size_t QuantizedCodeCount(uint32_t n_tokens, uint32_t n_coeffs, uint32_t group_size, std::span<const uint8_t> bits) {
  size_t kept = 0;
  for (size_t g = 0; g < bits.size(); ++g) {
    if (bits[g] == 0) continue;
    const uint64_t c0 = uint64_t{group_size} * g;
    if (c0 < n_coeffs) kept += std::min<uint64_t>(group_size, n_coeffs - c0);
  }
  return kept * n_tokens;
}

size_t QuantizedScaleCount(uint32_t n_tokens, std::span<const uint8_t> bits) {
  const size_t kept = static_cast<size_t>(std::count_if(bits.begin(), bits.end(), [](uint8_t b) { return b > 0; }));
  return kept * n_tokens;
}

void QuantizeBlock(const float* coeffs, uint32_t n_tokens, uint32_t n_coeffs, uint32_t group_size,
                   std::span<const uint8_t> bits, QuantizedBlock* out) {
  out->codes.clear();
  out->scales.clear();
  if (!BitsValid(n_coeffs, group_size, bits)) {
    assert(false && "QuantizeBlock: allocation does not match n_coeffs / group_size");
    return;
  }
  out->codes.resize(QuantizedCodeCount(n_tokens, n_coeffs, group_size, bits));
  out->scales.resize(QuantizedScaleCount(n_tokens, bits));
  uint8_t* codes = out->codes.data();
  uint16_t* scales = out->scales.data();
  for (uint32_t g = 0; g < bits.size(); ++g) {
    if (bits[g] == 0) continue;
    const size_t c0 = size_t{g} * group_size;
    const uint32_t len = static_cast<uint32_t>(std::min<size_t>(group_size, n_coeffs - c0));
    for (uint32_t t = 0; t < n_tokens; ++t) {
      QuantizeGroup(coeffs + size_t{t} * n_coeffs + c0, len, bits[g], codes, scales);
      codes += len;
      ++scales;
    }
  }
}

Status DequantizeBlock(const QuantizedBlock& in, uint32_t n_tokens, uint32_t n_coeffs, uint32_t group_size,
                       std::span<const uint8_t> bits, float* coeffs) {
  return DequantizeBlock(in.codes, in.scales, n_tokens, n_coeffs, group_size, bits, coeffs);
}

Status DequantizeBlock(std::span<const uint8_t> in_codes, std::span<const uint16_t> in_scales, uint32_t n_tokens,
                       uint32_t n_coeffs, uint32_t group_size, std::span<const uint8_t> bits, float* coeffs) {
  if (!BitsValid(n_coeffs, group_size, bits)) {
    return InvalidArgument(
        FormatMessage("kvtc allocation of %zu groups (max 8 bits) does not fit %u coefficients "
                      "in groups of %u",
                      bits.size(), n_coeffs, group_size));
  }
  const size_t want_codes = QuantizedCodeCount(n_tokens, n_coeffs, group_size, bits);
  const size_t want_scales = QuantizedScaleCount(n_tokens, bits);
  KVC_CHECK_CORRUPT(in_codes.size() == want_codes, "kvtc block holds %zu codes, expected %zu", in_codes.size(),
                    want_codes);
  KVC_CHECK_CORRUPT(in_scales.size() == want_scales, "kvtc block holds %zu scales, expected %zu", in_scales.size(),
                    want_scales);

  std::vector<float> m(n_tokens);
  const uint8_t* codes = in_codes.data();
  const uint16_t* scales = in_scales.data();
  for (uint32_t g = 0; g < bits.size(); ++g) {
    const size_t c0 = size_t{g} * group_size;
    const uint32_t len = static_cast<uint32_t>(std::min<size_t>(group_size, n_coeffs - c0));
    const uint32_t b = bits[g];
    if (b == 0) {
      for (uint32_t t = 0; t < n_tokens; ++t) std::fill_n(coeffs + size_t{t} * n_coeffs + c0, len, 0.0f);
      continue;
    }
    // Validation is branch-free reductions, so checking hostile input costs little.
    uint32_t bad_scale = 0;
    for (uint32_t t = 0; t < n_tokens; ++t) {
      bad_scale |= static_cast<uint32_t>(scales[t] >= kFirstBadScale);
      m[t] = ScaleToFloat(scales[t]);
    }
    KVC_CHECK_CORRUPT(bad_scale == 0, "kvtc group %u: a scale is negative, inf or NaN", g);
    const size_t n_codes = size_t{n_tokens} * len;
    KVC_CHECK_CORRUPT((OrOfCodes(codes, n_codes) >> b) == 0, "kvtc group %u: a code does not fit in %u bits", g, b);

    for (uint32_t t = 0; t < n_tokens; ++t) {
      DequantiseRun(codes + size_t{t} * len, len, MakeDequantiser(m[t], b), coeffs + size_t{t} * n_coeffs + c0);
    }
    codes += n_codes;
    scales += n_tokens;
  }
  return Status::Ok();
}

std::vector<std::array<double, 9>> MeasureGroupErrors(const float* coeffs, uint32_t n_tokens, uint32_t n_coeffs,
                                                      uint32_t group_size) {
  const uint32_t n_groups = NumQuantGroups(n_coeffs, group_size);
  std::vector<std::array<double, 9>> errors(n_groups);
  for (auto& e : errors) e.fill(0.0);
  if (n_tokens == 0) return errors;
  std::vector<uint8_t> codes(group_size);
  std::vector<float> rec(group_size);
  for (uint32_t g = 0; g < n_groups; ++g) {
    const size_t c0 = size_t{g} * group_size;
    const uint32_t len = static_cast<uint32_t>(std::min<size_t>(group_size, n_coeffs - c0));
    std::array<double, 9>& err = errors[g];
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const float* x = coeffs + size_t{t} * n_coeffs + c0;
      for (uint32_t i = 0; i < len; ++i) err[0] += static_cast<double>(x[i]) * x[i];
      // The same scale serves every width; the codes and reconstruction are exactly what
      // QuantizeGroup / DequantizeGroup produce.
      const float m = Fp16ToFp32(ScaleOf(x, len));
      if (m == 0.0f) continue;  // an all-zero group reconstructs exactly at every width
      for (uint32_t b = 1; b <= kMaxQuantBits; ++b) {
        QuantiseValues(x, len, b, m, codes.data());
        DequantiseRun(codes.data(), len, MakeDequantiser(m, b), rec.data());
        double e = 0.0;
        for (uint32_t i = 0; i < len; ++i) {
          const double d = static_cast<double>(x[i]) - rec[i];
          e += d * d;
        }
        err[b] += e;
      }
    }
    const double inv = 1.0 / n_tokens;
    for (double& e : err) e *= inv;
  }
  return errors;
}

}  // namespace kvc
