// video: lossless video coding of quantised KV (KVCodec, design brief §2.2). K and V are
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
  const CodecInfo& info() const override;
  // Levels "8" (default), "6", "4": bits per value. Params: coder, layout, order, planes, group,
  // preset (info().params lists them with their defaults). Inputs must be finite and within
  // fp16 range. Every value is reconstructed within half its group's step (plus fp16 rounding).
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  Result<KvCache> Decode(const KvcFile& file, const CodecContext& context) const override;
};

}  // namespace kvc
