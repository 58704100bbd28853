// rotquant's per-vector arithmetic (docs/format.md, "rotquant"): the rotation, the scale code and
// the Lloyd-Max codes of a layer's head vectors, and back. A portable path and vector paths (for
// head_dim a multiple of 8: AVX2, and AVX-512 where it runs) with the same results bit for bit:
// the same operations on every value in the same order, so a file's bytes and its decoded values
// do not depend on the CPU.
#pragma once

#include <array>
#include <cstdint>
#include <span>
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
  // A layer coded as the codec does, each vector in one pass: its RMS (of its values as given,
  // which the rotation keeps), the layer's top (the largest RMS rounded up to fp16, returned as
  // fp16 bits), the scale codes, and the codes of the rotated vectors, which are never stored.
  // Each code is the number of thresholds below its rotated value over the vector's scale
  // (top * 2^(-scale_code / 16)), computed as one product by norm / scale; packed LSB first into
  // `codes` (CodeBytes(n_vectors) of them, zeroed by the caller).
  uint16_t Code(const float* x, uint64_t n_vectors, uint8_t* scale_codes, uint8_t* codes,
                VectorIsa isa = VectorIsa::kAuto) const;
  uint16_t CodeFp16(const uint16_t* x, uint64_t n_vectors, uint8_t* scale_codes, uint8_t* codes,
                    VectorIsa isa = VectorIsa::kAuto) const;
  // x ([token][head][dim]) from codes and scales; every value within +-65504.
  void Reconstruct(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top, float* x,
                   VectorIsa isa = VectorIsa::kAuto) const;
  // The same as fp16, each value Reconstruct's rounded to nearest even: one pass to an fp16 cache.
  void ReconstructFp16(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top, uint16_t* x,
                       VectorIsa isa = VectorIsa::kAuto) const;
  // Whether the bits past the last code in the last byte are all zero (what the encoder writes).
  bool PaddingIsZero(const uint8_t* codes, uint64_t n_vectors) const;

  uint64_t CodeBytes(uint64_t n_vectors) const { return (n_vectors * dim_ * bits_ + 7) / 8; }
  // The values codes stand for, in units of a vector's scale (ascending), and the thresholds
  // between them: code q of a value u is the number of thresholds below u.
  std::span<const float> levels() const { return {levels_.data(), n_levels_}; }
  std::span<const float> thresholds() const { return {thresholds_.data(), n_levels_ - 1}; }

 private:
  template <typename In>
  uint16_t CodeFrom(const In* in, uint64_t n_vectors, uint8_t* scale_codes, uint8_t* codes, VectorIsa isa) const;
  template <typename Out>
  void ReconstructInto(const uint8_t* codes, uint64_t n_vectors, const uint8_t* scale_codes, float top, Out* x,
                       VectorIsa isa) const;

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
