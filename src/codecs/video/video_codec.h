// video: lossless video coding of quantised KV (as KVCodec does). K and V are
// quantised per channel group over the chunk (the only lossy step), laid out as pictures
// (video_layout.h), and coded losslessly with x265, x264 or FFV1 through libavcodec; decode goes
// through a VideoDecoderBackend (CPU now, NVDEC later) chosen in the CodecContext.
// Byte layout: docs/format.md ("video").
#pragma once

#include "codecs/codec.h"

namespace kvc {

class VideoCodec final : public Codec {
 public:
  // Registered under this id in every .kvc header; never reuse it.
  static constexpr uint16_t kId = 5;
  // Channels per quantiser scale by default: a head's worth on both test models. Wider groups
  // code more compactly at the same bits (narrow channels use fewer codes) with no measurable
  // perplexity change at 8 and 6 bits (docs/results.md, "video quantiser groups").
  static constexpr uint32_t kDefaultGroup = 64;
  const CodecInfo& info() const override;
  // Levels "8" (default), "6", "4": bits per value. Params: coder, layout, order, planes, group,
  // preset (info().params lists them with their defaults). Inputs must be finite and within
  // fp16 range. Every value is reconstructed within half its group's step (plus fp16 rounding).
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
