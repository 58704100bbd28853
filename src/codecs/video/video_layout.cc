#include "codecs/video/video_layout.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/half.h"

namespace kvc {
namespace {

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

}  // namespace

const char* VideoLayoutName(VideoLayout layout) { return layout == VideoLayout::kTokenFrames ? "frames" : "axis"; }

LayoutGeometry::LayoutGeometry(const KvShape& shape, const LayoutSpec& spec) : shape_(shape), spec_(spec) {
  layers_per_stream_picture_ = spec.layer_planes ? 3 : 1;
  const uint32_t planes = layers_per_stream_picture_;
  if (shape.layer_elems() == 0) return;
  const uint32_t layer_groups = CeilDiv(shape.n_layers, planes);
  if (spec.layout == VideoLayout::kTokenFrames) {
    // A head's channels as a near-square tile whose width is a power of two, heads in a
    // near-square grid: small pictures stay as compact as the codec's blocks allow.
    const uint32_t root = static_cast<uint32_t>(std::ceil(std::sqrt(static_cast<double>(shape.head_dim))));
    tile_w_ = std::bit_ceil(root);
    tile_h_ = CeilDiv(shape.head_dim, tile_w_);
    grid_w_ = static_cast<uint32_t>(std::ceil(std::sqrt(static_cast<double>(shape.n_kv_heads))));
    const uint32_t grid_h = CeilDiv(shape.n_kv_heads, grid_w_);
    const PictureShape picture{grid_w_ * tile_w_, grid_h * tile_h_, planes};
    streams_.assign(layer_groups, Stream{picture, shape.n_tokens});
  } else {
    const PictureShape picture{shape.n_tokens, static_cast<uint32_t>(shape.row_elems()), planes};
    streams_.assign(1, Stream{picture, layer_groups});
  }
}

LayoutGeometry::Place LayoutGeometry::Locate(uint32_t layer, uint32_t token, uint32_t position) const {
  const uint32_t planes = layers_per_stream_picture_;
  const uint32_t plane = layer % planes;
  if (spec_.layout == VideoLayout::kTokenFrames) {
    const Stream& s = streams_[layer / planes];
    const uint32_t head_slot = position / shape_.head_dim;
    const uint32_t i = position % shape_.head_dim;
    const uint32_t x = (head_slot % grid_w_) * tile_w_ + i % tile_w_;
    const uint32_t y = (head_slot / grid_w_) * tile_h_ + i / tile_w_;
    return {layer / planes,
            token * s.picture.frame_bytes() + plane * s.picture.plane_bytes() + uint64_t{y} * s.picture.width + x};
  }
  const Stream& s = streams_[0];
  return {0, (layer / planes) * s.picture.frame_bytes() + plane * s.picture.plane_bytes() +
                 uint64_t{position} * s.picture.width + token};
}

LayoutGeometry::LayerPlaces LayoutGeometry::PlaceLayer(uint32_t layer) const {
  const uint32_t planes = layers_per_stream_picture_;
  const uint32_t plane = layer % planes;
  const uint32_t channels = shape_.n_kv_heads * shape_.head_dim;
  LayerPlaces places;
  places.position_offsets.resize(channels);
  if (spec_.layout == VideoLayout::kTokenFrames) {
    const PictureShape& picture = streams_[layer / planes].picture;
    places.stream = layer / planes;
    places.base = uint64_t{plane} * picture.plane_bytes();
    places.token_stride = picture.frame_bytes();
    for (uint32_t pos = 0; pos < channels; ++pos) {
      const uint32_t head_slot = pos / shape_.head_dim, i = pos % shape_.head_dim;
      const uint32_t x = (head_slot % grid_w_) * tile_w_ + i % tile_w_;
      const uint32_t y = (head_slot / grid_w_) * tile_h_ + i / tile_w_;
      places.position_offsets[pos] = uint64_t{y} * picture.width + x;
    }
    return places;
  }
  const PictureShape& picture = streams_[0].picture;
  places.base = uint64_t{layer / planes} * picture.frame_bytes() + uint64_t{plane} * picture.plane_bytes();
  places.token_stride = 1;
  for (uint32_t pos = 0; pos < channels; ++pos) places.position_offsets[pos] = uint64_t{pos} * picture.width;
  return places;
}

namespace {

// items x features view of a [token][channel] layer.
std::vector<uint32_t> OrderByChain(const uint8_t* codes, uint32_t n_items, uint32_t n_features, size_t item_stride,
                                   size_t feature_stride, uint32_t max_features) {
  std::vector<uint32_t> order;
  if (n_items == 0) return order;
  const uint32_t stride = std::max(1u, CeilDiv(n_features, std::max(1u, max_features)));
  const uint32_t n_samples = n_features == 0 ? 0 : CeilDiv(n_features, stride);
  std::vector<uint8_t> rows(size_t{n_items} * n_samples);  // [item][sample]
  for (uint32_t i = 0; i < n_items; ++i) {
    for (uint32_t s = 0; s < n_samples; ++s) {
      rows[size_t{i} * n_samples + s] = codes[i * item_stride + size_t{s} * stride * feature_stride];
    }
  }
  auto distance = [&](uint32_t a, uint32_t b) {
    const uint8_t* pa = rows.data() + size_t{a} * n_samples;
    const uint8_t* pb = rows.data() + size_t{b} * n_samples;
    uint32_t d = 0;
    for (uint32_t s = 0; s < n_samples; ++s) d += static_cast<uint32_t>(std::abs(int{pa[s]} - int{pb[s]}));
    return d;
  };
  std::vector<uint8_t> used(n_items, 0);
  order.reserve(n_items);
  uint32_t current = 0;
  used[0] = 1;
  order.push_back(0);
  for (uint32_t k = 1; k < n_items; ++k) {
    uint32_t best = 0;
    uint32_t best_d = std::numeric_limits<uint32_t>::max();
    for (uint32_t i = 0; i < n_items; ++i) {
      if (used[i]) continue;
      const uint32_t d = distance(current, i);
      if (d < best_d) {
        best_d = d;
        best = i;
      }
    }
    used[best] = 1;
    order.push_back(best);
    current = best;
  }
  return order;
}

}  // namespace

std::vector<uint32_t> OrderChannels(const uint8_t* codes, uint32_t n_tokens, uint32_t n_channels,
                                    uint32_t max_features) {
  return OrderByChain(codes, n_channels, n_tokens, 1, n_channels, max_features);
}

std::vector<uint32_t> OrderTokens(const uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t max_features) {
  return OrderByChain(codes, n_tokens, n_channels, n_channels, 1, max_features);
}

bool IsPermutation(std::span<const uint32_t> order, uint32_t n) {
  if (order.size() != n) return false;
  std::vector<uint8_t> seen(n, 0);
  for (uint32_t c : order) {
    if (c >= n || seen[c]) return false;
    seen[c] = 1;
  }
  return true;
}

std::vector<uint8_t> CentreChannels(uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t bits) {
  const uint32_t mask = (1u << bits) - 1;
  const uint32_t half = 1u << (bits - 1);
  std::vector<uint8_t> centres(n_channels, 0);
  std::vector<uint32_t> histogram(256);
  for (uint32_t c = 0; c < n_channels; ++c) {
    std::fill(histogram.begin(), histogram.end(), 0);
    for (uint32_t t = 0; t < n_tokens; ++t) ++histogram[codes[size_t{t} * n_channels + c]];
    uint32_t seen = 0;
    uint32_t median = 0;
    while (median < 255 && 2 * (seen + histogram[median]) < n_tokens + 1) seen += histogram[median++];
    centres[c] = static_cast<uint8_t>(median);
    for (uint32_t t = 0; t < n_tokens; ++t) {
      uint8_t& v = codes[size_t{t} * n_channels + c];
      v = static_cast<uint8_t>((v + half - median) & mask);
    }
  }
  return centres;
}

void UncentreChannels(uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t bits,
                      std::span<const uint8_t> centres) {
  const uint32_t mask = (1u << bits) - 1;
  const uint32_t half = 1u << (bits - 1);
  for (uint32_t t = 0; t < n_tokens; ++t) {
    uint8_t* row = codes + size_t{t} * n_channels;
    for (uint32_t c = 0; c < n_channels; ++c) row[c] = static_cast<uint8_t>((row[c] + centres[c] - half) & mask);
  }
}

void QuantiseLayer(const float* x, uint32_t n_tokens, uint32_t n_channels, uint32_t group, uint32_t bits,
                   std::vector<GroupScale>* scales, uint8_t* codes) {
  const uint32_t n_groups = CeilDiv(n_channels, group);
  const float levels = static_cast<float>((1u << bits) - 1);
  scales->assign(n_groups, {});
  std::vector<float> lo(n_channels, std::numeric_limits<float>::infinity());
  std::vector<float> hi(n_channels, -std::numeric_limits<float>::infinity());
  for (uint32_t t = 0; t < n_tokens; ++t) {
    const float* row = x + size_t{t} * n_channels;
    for (uint32_t c = 0; c < n_channels; ++c) {
      lo[c] = std::min(lo[c], row[c]);
      hi[c] = std::max(hi[c], row[c]);
    }
  }
  std::vector<float> gmin(n_groups);
  std::vector<float> ginv(n_groups);
  for (uint32_t g = 0; g < n_groups; ++g) {
    const uint32_t begin = g * group;
    const uint32_t end = std::min(n_channels, begin + group);
    const float glo = *std::min_element(lo.begin() + begin, lo.begin() + end);
    const float ghi = *std::max_element(hi.begin() + begin, hi.begin() + end);
    // + 0.0f: which zero a min reduction returns must not reach the bytes.
    const uint16_t min_h = Fp32ToFp16Down(glo + 0.0f);
    gmin[g] = Fp16ToFp32(min_h);
    // And for the scale: a group of -0 only gives ghi - gmin = -0, a sign the decoder rejects.
    const uint16_t scale_h = Fp32ToFp16Up((ghi - gmin[g]) / levels + 0.0f);
    const float scale = Fp16ToFp32(scale_h);
    ginv[g] = scale > 0.0f ? 1.0f / scale : 0.0f;
    (*scales)[g] = {min_h, scale_h};
  }
  for (uint32_t t = 0; t < n_tokens; ++t) {
    const float* row = x + size_t{t} * n_channels;
    uint8_t* out = codes + size_t{t} * n_channels;
    for (uint32_t c = 0; c < n_channels; ++c) {
      const uint32_t g = c / group;
      const float q = std::clamp(std::nearbyint((row[c] - gmin[g]) * ginv[g]), 0.0f, levels);
      out[c] = static_cast<uint8_t>(q);
    }
  }
}

void DequantiseLayer(const uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t group,
                     std::span<const GroupScale> scales, float* x) {
  std::vector<float> gmin(scales.size());
  std::vector<float> gscale(scales.size());
  for (size_t g = 0; g < scales.size(); ++g) {
    gmin[g] = Fp16ToFp32(scales[g].min_fp16);
    gscale[g] = Fp16ToFp32(scales[g].scale_fp16);
  }
  for (uint32_t t = 0; t < n_tokens; ++t) {
    const uint8_t* in = codes + size_t{t} * n_channels;
    float* row = x + size_t{t} * n_channels;
    for (uint32_t c = 0; c < n_channels; ++c) {
      const uint32_t g = c / group;
      // Clamped into fp16 range: a top code times a rounded-up scale may pass 65504.
      row[c] = std::clamp(gmin[g] + static_cast<float>(in[c]) * gscale[g], -65504.0f, 65504.0f);
    }
  }
}

double NeighbourDifferenceRatio(const float* x, uint32_t n_tokens, uint32_t n_channels) {
  if (n_tokens < 2) return 0.0;
  double sum_ratio = 0.0;
  uint32_t counted = 0;
  for (uint32_t c = 0; c < n_channels; ++c) {
    double mean = 0.0;
    double dmean = 0.0;
    for (uint32_t t = 0; t < n_tokens; ++t) mean += x[size_t{t} * n_channels + c];
    for (uint32_t t = 1; t < n_tokens; ++t) dmean += x[size_t{t} * n_channels + c] - x[size_t{t - 1} * n_channels + c];
    mean /= n_tokens;
    dmean /= n_tokens - 1;
    double var = 0.0;
    double dvar = 0.0;
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const double v = x[size_t{t} * n_channels + c] - mean;
      var += v * v;
    }
    for (uint32_t t = 1; t < n_tokens; ++t) {
      const double d = x[size_t{t} * n_channels + c] - x[size_t{t - 1} * n_channels + c] - dmean;
      dvar += d * d;
    }
    var /= n_tokens;
    dvar /= n_tokens - 1;
    if (var <= 0.0) continue;
    sum_ratio += dvar / var;
    ++counted;
  }
  return counted == 0 ? 0.0 : sum_ratio / counted;
}

}  // namespace kvc
