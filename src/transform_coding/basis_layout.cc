#include "transform_coding/basis_layout.h"

#include <cstring>

namespace kvc {

BasisSlice SliceOf(const KvtcCalibration& c, uint32_t basis) {
  switch (c.grouping) {
    case KvtcGrouping::kLayerHead:
      return {basis / c.n_kv_heads, 1, basis % c.n_kv_heads, 1};
    case KvtcGrouping::kLayer:
      return {basis, 1, 0, c.n_kv_heads};
    case KvtcGrouping::kAll:
      return {0, c.n_layers, 0, c.n_kv_heads};
  }
  return {};
}

std::optional<InPlaceSlice> InPlace(const KvtcCalibration& c, uint32_t basis) {
  const BasisSlice s = SliceOf(c, basis);
  if (s.n_layers != 1) return std::nullopt;
  return InPlaceSlice{s.layer_begin, size_t{s.head_begin} * c.head_dim};
}

namespace {

// Calls copy(token_offset_in_x, offset_in_layer_rows, layer, floats) for every piece.
template <typename F>
void ForEachPiece(const KvtcCalibration& c, uint32_t basis, size_t n_tokens, F&& copy) {
  const BasisSlice s = SliceOf(c, basis);
  const size_t row = size_t{c.n_kv_heads} * c.head_dim;
  const size_t piece = size_t{s.n_heads} * c.head_dim;
  const size_t dim = piece * s.n_layers;
  for (size_t t = 0; t < n_tokens; ++t) {
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      copy(t * dim + l * piece, t * row + size_t{s.head_begin} * c.head_dim, s.layer_begin + l, piece);
    }
  }
}

}  // namespace

void GatherBasis(const KvtcCalibration& c, uint32_t basis, const std::vector<std::vector<float>>& layers,
                 size_t n_tokens, float* x) {
  ForEachPiece(c, basis, n_tokens, [&](size_t at_x, size_t at_row, uint32_t layer, size_t n) {
    std::memcpy(x + at_x, layers[layer].data() + at_row, n * sizeof(float));
  });
}

void ScatterBasis(const KvtcCalibration& c, uint32_t basis, const float* x, size_t n_tokens,
                  std::vector<std::vector<float>>* layers) {
  ForEachPiece(c, basis, n_tokens, [&](size_t at_x, size_t at_row, uint32_t layer, size_t n) {
    std::memcpy((*layers)[layer].data() + at_row, x + at_x, n * sizeof(float));
  });
}

}  // namespace kvc
