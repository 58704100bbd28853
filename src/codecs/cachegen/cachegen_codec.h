// cachegen: CacheGen (SIGCOMM'24). Tokens are split into groups; per (layer, channel) the
// group's first token (the anchor) is quantised on its own and every other token as its delta
// to the anchor, so groups decode independently. Deeper layers get fewer delta bins, because
// shallow layers are the ones output quality is sensitive to. Codes are rANS-coded with one
// distribution per (kind, layer, channel) for deltas and per (kind, layer) for anchors, built
// from the chunk itself and stored with it.
// Byte layout: docs/format.md ("cachegen").
#pragma once

#include <cstdint>
#include <string_view>

#include "codecs/codec.h"

namespace kvc {

class CacheGenCodec final : public Codec {
 public:
  // Registered under this id in every .kvc header; never reuse it.
  static constexpr uint16_t kId = 4;
  static constexpr uint32_t kDefaultGroup = 10;
  static constexpr uint32_t kMaxGroup = 65536;

  // Delta bins of one kind (K or V) at one level: `shallow_bins` for layers below
  // `shallow_layers`, `deep_bins` from there on. A delta code takes bins - 1 values, centred on 0.
  struct Bands {
    uint32_t shallow_bins = 0;
    uint32_t deep_bins = 0;
    uint32_t shallow_layers = 0;
    uint32_t BinsOf(uint32_t layer) const { return layer < shallow_layers ? shallow_bins : deep_bins; }
    bool operator==(const Bands&) const = default;
  };
  // The bands a level gives a model of n_layers layers (level_id: 0 high, 1 medium, 2 low).
  static Bands KeyBands(uint32_t level_id, uint32_t n_layers);
  static Bands ValueBands(uint32_t level_id, uint32_t n_layers);

  const CodecInfo& info() const override;
  // Levels "high", "medium" (default), "low"; param group (1..65536, default 10). Inputs must
  // be finite and within fp16 range, otherwise InvalidArgument. Every anchor element is
  // reconstructed within half its channel's anchor step, every other element within half its
  // channel's delta step (plus fp32 rounding).
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  // Self-describing: group, level and bins come from the header's codec params.
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
