// raw: the KV cache stored as fp16, uncompressed. The baseline every ratio is measured against
// and the reference for lossless reuse. Section layout: docs/format.md.
#pragma once

#include "codecs/codec.h"

namespace kvc {

class RawCodec final : public Codec {
 public:
  // Registered under this id in every .kvc header; never reuse it.
  static constexpr uint16_t kId = 1;

  const CodecInfo& info() const override;
  // Level "fp16" (the only one). An fp16 source is copied bit for bit; fp32 and bf16 sources
  // are rounded to nearest even. A finite value that overflows fp16 is an InvalidArgument.
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  // Restores the header's dtype (the source's), converting from fp16 where it differs.
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
