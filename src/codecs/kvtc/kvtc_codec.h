// kvtc: KV-cache transform coding (KVTC). Keys have RoPE undone when the calibration says so
// (normal, NeoX and sectioned RoPE; other kinds are coded as stored), K and V are
// projected on a calibrated PCA basis, coefficients are quantised per token in groups with the
// bit widths a dynamic programme chose for the target ratio (the level), and the codes are
// entropy-coded. The first `sinks` positions and the last `window` tokens stay fp16.
// Layout: docs/format.md, "kvtc".
#pragma once

#include "codecs/codec.h"

namespace kvc {

class KvtcCodec final : public Codec {
 public:
  const CodecInfo& info() const override;
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
