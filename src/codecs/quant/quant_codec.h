// quant: KIVI-style asymmetric uniform quantisation to 8 or 4 bits. Keys are quantised per
// channel (a group is group_size consecutive tokens of one channel), values per token (a group
// is group_size consecutive channels of one token's row), because key outliers live in fixed
// channels while value outliers do not. Each group stores an fp16 (min, scale).
// Byte layout: docs/format.md.
#pragma once

#include "codecs/codec.h"

namespace kvc {

class QuantCodec final : public Codec {
 public:
  // Registered under this id in every .kvc header; never reuse it.
  static constexpr uint16_t kId = 2;
  static constexpr uint32_t kDefaultGroupSize = 128;
  static constexpr uint32_t kMaxGroupSize = 65536;

  const CodecInfo& info() const override;
  // Levels "8" (default) and "4"; param group_size (1..65536, default 128). Inputs must be
  // finite and within fp16 range (|x| <= 65504), otherwise InvalidArgument. Every element is
  // reconstructed within scale/2 of its input (plus fp32 rounding), scale being its group's.
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  // Self-describing: bits and group_size come from the header's codec params.
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
