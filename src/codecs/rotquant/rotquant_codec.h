// rotquant: calibration-free rotation + scalar quantisation, the class serving stacks ship
// (TurboQuant-style). Every head's K or V vector is multiplied by a fixed random orthogonal
// matrix (a seeded sign flip, then a normalised fast Walsh-Hadamard transform over the vector's
// power-of-two blocks: O(d log d), nothing stored but the seed), which spreads outlier channels
// over all coordinates and makes them near Gaussian; each rotated vector is then quantised with
// the Gaussian-optimal (Lloyd-Max) scalar quantiser at 2, 3 or 4 bits against its own RMS, kept as
// an 8-bit log-scale code. No calibration, no model profile: the floor for models without one.
// Byte layout: docs/format.md ("rotquant").
#pragma once

#include "codecs/codec.h"

namespace kvc {

class RotQuantCodec final : public Codec {
 public:
  // Registered under this id in every .kvc header; never reuse it.
  static constexpr uint16_t kId = 6;
  static constexpr uint32_t kDefaultSeed = 0x6b76636f;  // "kvco"

  const CodecInfo& info() const override;
  // Levels "4", "3" (default), "2": bits per coordinate. Param seed (u32) picks the rotation.
  Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options, const CodecContext& context) const override;
  // Self-describing: bits and seed come from the header's codec params.
  Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const override;
};

}  // namespace kvc
