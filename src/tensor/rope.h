// Rotary position embedding as llama.cpp applies it to keys, so keys taken from its cache can
// be rotated back to position 0 (what transform coding fits a basis on) and forward again.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/vector_isa.h"

namespace kvc {

// llama.cpp's LLAMA_ROPE_TYPE_NORM rotates adjacent channel pairs (2i, 2i+1);
// LLAMA_ROPE_TYPE_NEOX rotates (i, i + n_rot/2).
enum class RopeType : uint8_t { kNormal = 0, kNeox = 1 };

struct RopeParams {
  RopeType type = RopeType::kNormal;
  uint32_t n_rot = 0;  // rotated channels per head (the rest pass through); 0 = head_dim
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // linear position scaling (1 = none)

  bool operator==(const RopeParams&) const = default;
};

// Rotates `n_tokens` rows laid out [token][head][channel] in place; token t sits at position
// pos_begin + t. `inverse` rotates back (undoes the embedding).
void RotateRows(const RopeParams& params, float* rows, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim,
                int32_t pos_begin, bool inverse);

// Cos/sin of every (position, pair) of a token range, applied to any number of layers and
// heads: decoders rotate every layer's keys at the same positions. The values are those of
// RotateRows; they depend only on the absolute position, so they are computed in aligned
// blocks of kBlockTokens positions kept in a small process-wide cache (every chunk of a
// long prefix and every repeat of one reuses them instead of calling sin/cos again).
class RopeTable {
 public:
  static constexpr uint32_t kBlockTokens = 256;

  RopeTable(const RopeParams& params, uint32_t head_dim, int32_t pos_begin, uint32_t n_tokens);
  // Same contract as RotateRows for the table's positions.
  void Rotate(float* rows, uint32_t n_heads, bool inverse) const { RotateTokens(rows, 0, n_tokens_, n_heads, inverse); }
  // Rotates tokens [first, first + count) of the table's range; `rows` points at token `first`.
  void RotateTokens(float* rows, uint32_t first, uint32_t count, uint32_t n_heads, bool inverse) const;
  // RotateTokens, then each value clamped to fp16's range and stored as fp16 in `out` (the same
  // [token][head][channel] layout), leaving `rows` as it is: the bits of RotateTokens followed by
  // Fp32ToFp16Clamped in one pass over the rows (a decoder's last step into an fp16 cache).
  // `isa` picks the path (tests compare them).
  void RotateTokensToFp16(const float* rows, uint32_t first, uint32_t count, uint32_t n_heads, bool inverse,
                          uint16_t* out, VectorIsa isa = VectorIsa::kAuto) const;

  // One block's angles: cos and sin of kBlockTokens positions, [token][pair] each; for
  // kNormal also in the order its pairs lie, [token][2 * pair + j]: cos2 = (c, c) and
  // sin2 = (-s, s) per pair, so a vector of rows multiplies by them without reshuffling.
  struct Block {
    std::vector<float> cos;
    std::vector<float> sin;
    std::vector<float> cos2;
    std::vector<float> sin2;
  };

 private:
  // Token t's angles: cos and sin per pair, and cos2/sin2 (kNormal only, else null).
  struct Angles {
    const float* cos;
    const float* sin;
    const float* cos2;
    const float* sin2;
  };
  Angles AnglesAt(uint32_t t) const;

  RopeParams params_;
  uint32_t head_dim_;
  uint32_t n_rot_;
  uint32_t n_tokens_;
  int32_t pos_begin_;
  int64_t first_block_;  // floor(pos_begin / kBlockTokens)
  std::vector<std::shared_ptr<const Block>> blocks_;
};

}  // namespace kvc
