// rotquant's per-vector arithmetic (docs/format.md, "rotquant"): the rotation, the scale code and
// the Lloyd-Max codes of a layer's head vectors, and back. A portable path and an AVX2 path (for
// head_dim a multiple of 8) with the same results bit for bit: the same operations on every
// value in the same order, so a file's bytes and its decoded values do not depend on the CPU.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "base/vector_isa.h"

namespace kvc::rotquant {

inline constexpr uint32_t kMinBits = 2;
inline constexpr uint32_t kMaxBits = 4;
inline constexpr uint8_t kZeroVector = 255;  // the scale code of a vector of zeros

// The geometry of one (kind, layer): head vectors of `dim` values, `heads` per token, coded at
// `bits` per value, rotated by the signs of `seed`.
class LayerCoder {
 public:
  LayerCoder(uint32_t dim, uint32_t heads, uint32_t bits);

  // The signs of (kind, layer): kind 0 K, 1 V.
  void SetSigns(uint32_t seed, uint32_t kind, uint32_t layer);

  // Rotates n_vectors vectors ([token][head][dim]) of x in place; rms gets each one's RMS.
  void Rotate(float* x, uint64_t n_vectors, double* rms, VectorIsa isa = VectorIsa::kAuto) const;
  // Codes of rotated vectors against their scales (top * 2^(-scale_code / 16)), packed LSB first
  // into `codes` (CodeBytes(n_vectors) of them, zeroed by the caller).
  void Quantise(const float* x, uint64_t n_vectors, const uint8_t* scale_codes, float top, uint8_t* codes,
                VectorIsa isa = VectorIsa::kAuto) const;
  // x ([token][head][dim]) from codes and scales; every value within +-65504.
  void Reconstruct(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top, float* x,
                   VectorIsa isa = VectorIsa::kAuto) const;
  // Whether the bits past the last code in the last byte are all zero (what the encoder writes).
  bool PaddingIsZero(const uint8_t* codes, uint64_t n_vectors) const;

  uint64_t CodeBytes(uint64_t n_vectors) const { return (n_vectors * dim_ * bits_ + 7) / 8; }

 private:
  uint32_t dim_, heads_, bits_;
  // The power-of-two blocks of dim, largest first; norm = 1 / sqrt(size).
  uint32_t n_blocks_ = 0;
  std::array<uint32_t, 13> block_offset_{}, block_size_{};
  std::array<float, 13> block_norm_{};
  std::array<float, 16> levels_{};      // ascending
  std::array<float, 15> thresholds_{};  // midpoints
  uint32_t n_levels_ = 0;
  std::vector<float> signs_;  // [head][dim], +-1
};

// The scale code of a vector of RMS `rms` in a layer whose largest is `top` (both >= 0), and the
// scale a code stands for.
uint8_t ScaleCode(double rms, float top);
float ScaleOf(float top, uint8_t code);

}  // namespace kvc::rotquant
