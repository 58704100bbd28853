// IEEE fp16 and bfloat16 <-> fp32 conversion, bit-exact and portable (no F16C requirement),
// rounding to nearest even as llama.cpp's ggml_fp32_to_fp16 does.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/vector_isa.h"

namespace kvc {

inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t Fp32ToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);   // NaN
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000) {                                              // result is subnormal or zero
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t v = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1))) ++v;
    return static_cast<uint16_t>(sign | v);
  }
  uint32_t v = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) ++v;
  return static_cast<uint16_t>(sign | v);
}

inline float Bf16ToFp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t Fp32ToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// The smallest fp16 not below x, for 0 <= x <= 65504: quantiser scales rounded this way never
// make an element clip.
inline uint16_t Fp32ToFp16Up(float x) {
  uint16_t h = Fp32ToFp16(x);
  if (Fp16ToFp32(h) < x) ++h;  // positive, so the next pattern up is the next value up
  return h;
}

// x clamped to fp16's range (NaN stays NaN, as std::clamp leaves it), then converted: one value
// of the bulk Fp32ToFp16Clamped below.
inline uint16_t Fp32ToFp16Clamped(float x) { return Fp32ToFp16(std::clamp(x, -65504.0f, 65504.0f)); }

// The largest fp16 not above x, for finite |x| <= 65504: a group minimum rounded this way keeps
// every element at or above it. Rounding keeps the sign (a small negative x gives -0), so one
// step in the sign-magnitude encoding is the next fp16 down.
inline uint16_t Fp32ToFp16Down(float x) {
  uint16_t h = Fp32ToFp16(x);
  if (Fp16ToFp32(h) > x) h = static_cast<uint16_t>((h & 0x8000) ? h + 1 : h - 1);
  return h;
}

// True when every value's magnitude bits (the float with its sign cleared, as an integer) are at
// most `max_abs_bits`. Integer compares, so the loop vectorises.
inline bool AllAbsBitsAtMost(const float* x, size_t n, uint32_t max_abs_bits) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    bad |= static_cast<uint32_t>((bits & 0x7fffffff) > max_abs_bits);
  }
  return bad == 0;
}

// True when every value is finite and within fp16's range (|x| <= 65504): encoders run it over
// whole layers before quantising.
inline bool AllInFp16Range(const float* x, size_t n) {
  constexpr uint32_t kFp16MaxBits = 0x477fe000;  // 65504.0f
  return AllAbsBitsAtMost(x, n, kFp16MaxBits);
}

// True when every value is finite (no inf or NaN).
inline bool AllFinite(const float* x, size_t n) {
  constexpr uint32_t kFloatMaxBits = 0x7f7fffff;  // FLT_MAX; infinity and NaN are above it
  return AllAbsBitsAtMost(x, n, kFloatMaxBits);
}

// x = clamp(x, -65504, 65504) for every value (NaN stays NaN), vectorised: decoders run it over
// everything they reconstruct so that no overshoot becomes an fp16 infinity.
void ClampToFp16Range(float* x, size_t n);
// ClampToFp16Range then Fp32ToFp16 in one pass, leaving `in` as it is: the same bits as the two
// calls (a decoder's last step from its fp32 rows to the fp16 cache). `isa` picks the path
// (tests compare them).
void Fp32ToFp16Clamped(const float* in, uint16_t* out, size_t n, VectorIsa isa = VectorIsa::kAuto);

void Fp16ToFp32(const uint16_t* in, float* out, size_t n);
void Fp32ToFp16(const float* in, uint16_t* out, size_t n);
void Bf16ToFp32(const uint16_t* in, float* out, size_t n);
void Fp32ToBf16(const float* in, uint16_t* out, size_t n);

}  // namespace kvc
