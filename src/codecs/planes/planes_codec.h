// planes: lossless coding of a KV cache in its own dtype (f16, bf16 or f32), for models with no
// measured quality profile, which may fetch only what decodes bit for bit. Each value is split
// into byte planes; the most significant plane (sign and exponent) is entropy coded with rANS,
// the others as the block coder finds best (stored where they do not compress).
// Byte layout: docs/format.md ("planes").
#pragma once

#include "codecs/codec.h"

namespace kvc {

class PlanesCodec final : public Codec {
 public:
  // Registered under this id in every .kvc header; never reuse it.
  static constexpr uint16_t kId = 7;

  const CodecInfo& info() const override;
  // Level "lossless" (the only one). Any bit pattern of any dtype is kept: NaN payloads,
  // infinities, -0, subnormals, values past the fp16 range.
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  // Restores the exact bytes, in the header's dtype.
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
