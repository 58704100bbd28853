// Where each quantised KV value goes in the video streams of the `video` codec: the
// picture geometry of each layout, the channel ordering, and the per-channel-group
// quantiser. Pure functions, shared by the codec and by the layout ablation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "libav/video_stream.h"
#include "tensor/kv_cache.h"

namespace kvc {

// Values are stored in .kvc params; never renumber.
enum class VideoLayout : uint8_t {
  // The published layout: one frame per token; a layer's heads x head_dim values tiled into
  // the picture, each head a near-square tile.
  kTokenFrames = 0,
  // Tokens along the picture's x axis, channels along y: one picture per layer.
  kTokenAxis = 1,
};
const char* VideoLayoutName(VideoLayout layout);

struct LayoutSpec {
  VideoLayout layout = VideoLayout::kTokenAxis;
  bool layer_planes = true;  // three consecutive layers as the planes of one yuv444p picture
};

// The streams of one kind (K or V) and where every (layer, token, position) lands in them.
// `position` is a channel's place in its layer's ordering (channel itself when unordered).
class LayoutGeometry {
 public:
  LayoutGeometry(const KvShape& shape, const LayoutSpec& spec);

  struct Stream {
    PictureShape picture;
    uint32_t n_frames = 0;
    uint64_t bytes() const { return picture.frame_bytes() * n_frames; }
  };
  const std::vector<Stream>& streams() const { return streams_; }

  struct Place {
    uint32_t stream;
    uint64_t offset;  // into that stream's planar frames
  };
  // `token` is a token's place in its layer's token order (the token itself when unordered).
  Place Locate(uint32_t layer, uint32_t token, uint32_t position) const;

  // Every place of one layer at once: Locate(layer, t, pos) is {stream, base + t * token_stride
  // + position_offsets[pos]}. The coders move every value of a chunk through these, where a call
  // per value (divisions included) cost the video decoder about a tenth of its time.
  struct LayerPlaces {
    uint32_t stream = 0;
    uint64_t base = 0;
    uint64_t token_stride = 0;
    std::vector<uint64_t> position_offsets;  // one per channel position
  };
  LayerPlaces PlaceLayer(uint32_t layer) const;

 private:
  KvShape shape_;
  LayoutSpec spec_;
  uint32_t layers_per_stream_picture_ = 1;  // planes
  uint32_t tile_w_ = 0, tile_h_ = 0, grid_w_ = 0;
  std::vector<Stream> streams_;
};

// A greedy nearest-neighbour chain through the items of a layer: starting from item 0, each next
// item is the unvisited one whose codes differ least (sum of absolute differences over the
// features, at most `max_features` of them, evenly sampled) from the current one, so that
// neighbouring pixels hold similar values. Ties go to the lowest index, so the order depends on
// the codes alone. codes: [token][channel]. Returns order[position] = item.
// Channels as items: the rows of the token-axis picture; tokens as items: the frames (or
// columns) follow each other by similarity instead of by position in the text.
std::vector<uint32_t> OrderChannels(const uint8_t* codes, uint32_t n_tokens, uint32_t n_channels,
                                    uint32_t max_features = 64);
std::vector<uint32_t> OrderTokens(const uint8_t* codes, uint32_t n_tokens, uint32_t n_channels,
                                  uint32_t max_features = 256);

// True when `order` holds each of 0..n-1 exactly once.
bool IsPermutation(std::span<const uint32_t> order, uint32_t n);

// Moves each channel's median code to the middle of the code range (2^(bits-1)), wrapping
// modulo 2^bits, so every row of a picture sits at the same level and a codec's prediction from
// neighbouring pixels is not thrown off by the channels' different offsets. codes: [token]
// [channel], changed in place; returns each channel's median (what UncentreChannels needs).
std::vector<uint8_t> CentreChannels(uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t bits);
void UncentreChannels(uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t bits,
                      std::span<const uint8_t> centres);

// Asymmetric uniform quantisation of one layer ([token][channel]) to `bits` bits, with one fp16
// (min, scale) per group of `group` consecutive channels over all tokens. min is rounded down
// and scale up, so every value maps into 0 .. 2^bits - 1; each value is reconstructed within
// half a step (plus fp16/fp32 rounding).
struct GroupScale {
  uint16_t min_fp16 = 0;
  uint16_t scale_fp16 = 0;
};
void QuantiseLayer(const float* x, uint32_t n_tokens, uint32_t n_channels, uint32_t group, uint32_t bits,
                   std::vector<GroupScale>* scales, uint8_t* codes);
void DequantiseLayer(const uint8_t* codes, uint32_t n_tokens, uint32_t n_channels, uint32_t group,
                     std::span<const GroupScale> scales, float* x);

// Variance of the difference between neighbouring tokens relative to the values' variance,
// averaged over channels (x: [token][channel]). 2 for independent tokens, near 0 for smooth
// ones: how much a predictor from the previous token can remove.
double NeighbourDifferenceRatio(const float* x, uint32_t n_tokens, uint32_t n_channels);

}  // namespace kvc
