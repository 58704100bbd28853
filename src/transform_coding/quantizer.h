// Per-token microscaled uniform quantisation of PCA coefficients.
//
// A group is `n` consecutive coefficients of one token. It stores one fp16 scale M (the group's
// largest magnitude, rounded up to an fp16 value so nothing clips) and one code per
// coefficient from a mid-rise uniform quantiser over [-M, M] with 2^bits cells:
//   step = 2M / 2^bits,  code = clamp(floor((x + M) / step), 0, 2^bits - 1),
//   x^ = -M + (code + 0.5) * step.
// Every reconstruction is exact in fp32 (M has 11 significant bits, code at most 8), so the
// decoder's loop and the per-group function agree bit for bit.
// Zero rule: a group whose values are all 0 gets M = 0, hence step = 0, and reconstructs to
// exactly +0 whatever its codes; the encoder writes 2^(bits-1) for them (the cell just above
// 0, the natural code of a zero). A mid-rise quantiser never outputs 0 for M > 0.
// Out-of-range input: |x| beyond the largest fp16 (65504), inf included, clips to M = 65504;
// NaN gets code 0. PCA coefficients of fp16 KV do not reach that in practice.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace kvc {

inline constexpr uint32_t kMaxQuantBits = 8;

// x: [n]; codes: [n] (one code per byte, < 2^bits); bits in 1..8.
void QuantizeGroup(const float* x, uint32_t n, uint32_t bits, uint8_t* codes, uint16_t* scale_fp16);
// Inverse of QuantizeGroup. The scale is trusted here (DequantizeBlock validates stored ones).
void DequantizeGroup(const uint8_t* codes, uint32_t n, uint32_t bits, uint16_t scale_fp16, float* out);

// Quantised coefficients of a block of tokens, laid out for an entropy coder: for each group g
// with bits[g] > 0, in group order, the codes of every token ([token][component in group],
// n_tokens * group_len bytes, contiguous), and scales [group][token]. Groups with 0 bits store
// nothing.
struct QuantizedBlock {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;  // fp16 bit patterns
};

// Number of component groups: ceil(n_coeffs / group_size) (the last may be shorter).
uint32_t NumQuantGroups(uint32_t n_coeffs, uint32_t group_size);
// Sizes QuantizeBlock produces and DequantizeBlock requires. bits must be valid (see below).
size_t QuantizedCodeCount(uint32_t n_tokens, uint32_t n_coeffs, uint32_t group_size, std::span<const uint8_t> bits);
size_t QuantizedScaleCount(uint32_t n_tokens, std::span<const uint8_t> bits);

// coeffs: [n_tokens][n_coeffs] row-major. Requires group_size > 0,
// bits.size() == NumQuantGroups(n_coeffs, group_size) and every bits[g] <= 8; on a violated
// precondition `out` is left empty (and debug builds assert).
void QuantizeBlock(const float* coeffs, uint32_t n_tokens, uint32_t n_coeffs, uint32_t group_size,
                   std::span<const uint8_t> bits, QuantizedBlock* out);

// Writes coeffs [n_tokens][n_coeffs]; components of 0-bit groups become 0. `in` is treated as
// hostile: wrong code or scale counts, a code >= 2^bits, or a scale that is negative (sign bit
// set), inf or NaN give kCorrupt. An inconsistent allocation (group_size 0, wrong bits.size(),
// bits > 8) is the caller's error: kInvalidArgument. On error, coeffs is unspecified.
[[nodiscard]] Status DequantizeBlock(const QuantizedBlock& in, uint32_t n_tokens, uint32_t n_coeffs,
                                     uint32_t group_size, std::span<const uint8_t> bits, float* coeffs);
// The same from codes and scales that lie in a caller's buffers (the decoder's spans into one
// chunk-wide array), so that decoding copies neither into a QuantizedBlock.
[[nodiscard]] Status DequantizeBlock(std::span<const uint8_t> codes, std::span<const uint16_t> scales,
                                     uint32_t n_tokens, uint32_t n_coeffs, uint32_t group_size,
                                     std::span<const uint8_t> bits, float* coeffs);

// Mean squared error per token of quantising each group at each width over a sample:
// errors[g][b] = sum over tokens and the group's components of (x - q_b(x))^2 / n_tokens, with
// errors[g][0] the group's energy (the error of dropping it). Feeds AllocateBits. All zeros if
// n_tokens == 0; empty if group_size == 0.
std::vector<std::array<double, 9>> MeasureGroupErrors(const float* coeffs, uint32_t n_tokens, uint32_t n_coeffs,
                                                      uint32_t group_size);

}  // namespace kvc
