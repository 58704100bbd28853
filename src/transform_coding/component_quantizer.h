// Per-component quantisation of PCA coefficients over a chunk of tokens (KvtcQuantizer::kComponent).
//
// A PCA coefficient is close to a zero-mean Gaussian whose spread is set by its component, not
// by its token, so one scale per component and chunk describes it better than a scale per token
// and group, and costs 16 bits per chunk instead of 16 bits per token. Component c at b bits:
//   s = its RMS over the chunk's tokens, rounded to the nearest fp16 (the stored scale),
//   step = s * GaussianStep(b) * multiplier   (evaluated in that order, in fp32),
//   L = 2^b,  code = clamp(floor(x / step) + L/2, 0, L - 1),
//   x^ = (code - L/2 + 0.5) * step            (mid-rise: no zero level).
// GaussianStep(b) is the step of the uniform quantiser with L levels that has the least mean
// squared error on a unit Gaussian; the calibrated multiplier corrects it per component and
// width for coefficients that are not Gaussian (heavy tails want a wider step at low widths).
// A scale of 0 (every value 0) reconstructs exactly 0 whatever the codes; the encoder writes L/2.
// The decoder computes the same fp32 step from the same three numbers, so encoder and decoder
// agree bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "transform_coding/calibration.h"
#include "transform_coding/quantizer.h"
#include "transform_coding/reconstruct_rows.h"

namespace kvc {

// Unit-Gaussian optimal uniform step for b = 1..8 bits (0 for b = 0).
float GaussianStep(uint32_t bits);

// The fp16 scale (bit pattern) of n values read with `stride`: RMS rounded to nearest, capped
// at the largest finite fp16. Values must be finite.
uint16_t ComponentScale(const float* x, size_t stride, uint32_t n);

// Codes of n values (read with `stride`) at `bits` (1..8) against scale and multiplier.
void QuantizeComponent(const float* x, size_t stride, uint32_t n, uint32_t bits, uint16_t scale_fp16, float multiplier,
                       uint8_t* codes);
// out[t * stride] = x^ of codes[t]. The scale is trusted here (DequantizeComponentBlock validates).
void DequantizeComponent(const uint8_t* codes, uint32_t n, uint32_t bits, uint16_t scale_fp16, float multiplier,
                         float* out, size_t stride);

// A chunk's coefficients, component-major ([n_coeffs][n_tokens], so each component's values are
// contiguous), quantised per component: for each component c
// with bits[c] > 0, in order, the codes of every token (n_tokens bytes) in `codes` and one
// scale in `scales`. multipliers: [n_coeffs][8] (the basis's step_multipliers, or a prefix).
// Preconditions: bits.size() == n_coeffs, bits <= 8, multipliers.size() >= 8 * n_coeffs; on a
// violation `out` is left empty (debug builds assert).
void QuantizeComponentBlock(const float* coeffs, uint32_t n_tokens, uint32_t n_coeffs, std::span<const uint8_t> bits,
                            std::span<const float> multipliers, QuantizedBlock* out);

// Writes coeffs [n_coeffs][n_tokens]; components with 0 bits become 0. `in` is hostile: wrong
// counts, a code >= 2^bits, or a scale that is negative, inf or NaN give kCorrupt; an
// inconsistent allocation is kInvalidArgument.
[[nodiscard]] Status DequantizeComponentBlock(const QuantizedBlock& in, uint32_t n_tokens, uint32_t n_coeffs,
                                              std::span<const uint8_t> bits, std::span<const float> multipliers,
                                              float* coeffs);

// The decoder's form of the same block, from codes and scales in its own buffers (spans into
// one chunk-wide array), for ReconstructFromCodes: each component with bits > 0, in order, as
// its codes (pointing into `codes`) and dequantisation; components with 0 bits are left out
// (they are 0). Checks as DequantizeComponentBlock.
[[nodiscard]] Status CodedComponentBlock(std::span<const uint8_t> codes, std::span<const uint16_t> scales,
                                         uint32_t n_tokens, uint32_t n_coeffs, std::span<const uint8_t> bits,
                                         std::span<const float> multipliers, std::vector<CodedComponent>* coded);

// Calibration statistics of one component over held-back coefficients cut into chunks of
// `chunk_tokens` (the last may be shorter), each chunk with its own scale as the codec does.
struct ComponentStats {
  std::array<float, 8> multipliers{};    // chosen per width: least squared error on the sample
  std::array<double, 9> error{};         // squared error per token at b = 0..8 (b = 0: the energy)
  std::array<double, 9> entropy_bits{};  // order-0 entropy of the codes, bits per token (b = 0: 0)
};

// x: one component's values over n tokens, read with `stride`. The multiplier of each width is
// the best of a fixed grid (0.5 .. 2.0), so no choice depends on a value tuned to one model.
ComponentStats MeasureComponent(const float* x, size_t stride, uint32_t n, uint32_t chunk_tokens);

}  // namespace kvc
