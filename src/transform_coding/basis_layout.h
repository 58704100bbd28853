// Which features of a token each PCA basis codes (per the calibration's grouping), and the
// copies between per-layer rows ([token][kv_head][channel]) and a basis's vectors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "transform_coding/calibration.h"

namespace kvc {

// A run of layers, and a run of heads within each of them.
struct BasisSlice {
  uint32_t layer_begin = 0, n_layers = 0, head_begin = 0, n_heads = 0;
};

// `basis` indexes one kind's bases (0 .. n_bases() - 1).
BasisSlice SliceOf(const KvtcCalibration& calibration, uint32_t basis);

// Where a basis's vectors lie when its slice is within one layer (every grouping but kAll):
// token t's vector is layer_rows[layer][t * row_elems + offset ...], so the codec can project
// from and reconstruct into the rows in place instead of gathering and scattering.
struct InPlaceSlice {
  uint32_t layer = 0;
  size_t offset = 0;
};
std::optional<InPlaceSlice> InPlace(const KvtcCalibration& calibration, uint32_t basis);

// x[t] (basis_dim floats) <- the slice of token t's rows, for t < n_tokens.
void GatherBasis(const KvtcCalibration& calibration, uint32_t basis, const std::vector<std::vector<float>>& layer_rows,
                 size_t n_tokens, float* x);
// The slice of token t's rows <- x[t].
void ScatterBasis(const KvtcCalibration& calibration, uint32_t basis, const float* x, size_t n_tokens,
                  std::vector<std::vector<float>>* layer_rows);

}  // namespace kvc
