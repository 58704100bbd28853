// Rotary position embedding as llama.cpp applies it to keys, so keys taken from its cache can
// be rotated back to position 0 (what transform coding fits a basis on) and forward again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "base/vector_isa.h"

namespace kvc {

// How a model's keys carry position, named after llama.cpp's llama_rope_type. kNormal, kNeox and
// the sectioned kinds kMrope and kImrope are rotated here; for the others RotateRows and RopeTable
// leave rows as they are.
//   kNormal: LLAMA_ROPE_TYPE_NORM rotates adjacent channel pairs (2i, 2i+1).
//   kNeox:   LLAMA_ROPE_TYPE_NEOX rotates (i, i + n_rot/2).
//   kNone:   LLAMA_ROPE_TYPE_NONE: no RoPE on keys (ALiBi or learned positions: GPT-2, BLOOM, MPT),
//            so the cache holds keys as the model computed them and there is nothing to undo.
//   kMrope, kImrope: LLAMA_ROPE_TYPE_MROPE / IMROPE, sectioned RoPE (Qwen2-VL, Qwen3-VL, GLM-4,
//            Qwen3.5): a head's pairs (i, i + n_rot/2) are split into sections
//            (rope.dimension_sections, interleaved for IMROPE), each rotated by its own component
//            of a multi-dimensional position (time, height, width) at NeoX's angles. A text
//            token's components are all its position, so on text every section turns by the
//            same angle NeoX's would: the rotation is NeoX's, and is undone as such
//            (src/llama/rope_kinds_test.cc checks it on llama.cpp's models: one token repeated,
//            its layer-0 keys rotated back as NeoX agree at every position to fp16 rounding).
//            kvcodec caches only text (token ids); an image token's 2-D position would need the
//            cell's positions, which kvcodec does not take.
//   kVision: LLAMA_ROPE_TYPE_VISION, vision encoders' 2-D RoPE: not undone (coded as stored).
enum class RopeType : uint8_t { kNormal = 0, kNeox = 1, kNone = 2, kMrope = 3, kImrope = 4, kVision = 5 };
inline constexpr RopeType kLastRopeType = RopeType::kVision;

// Whether kvcodec rotates keys of this kind (undoes RoPE before coding, applies it after).
// kMrope and kImrope rotate as kNeox (text positions; see above).
constexpr bool RopeRotatesKeys(RopeType type) {
  return type == RopeType::kNormal || type == RopeType::kNeox || type == RopeType::kMrope || type == RopeType::kImrope;
}
// llama.cpp's name: "normal", "neox", "none", "mrope", "imrope", "vision"; "unknown" outside the enum.
const char* RopeTypeName(RopeType type);
// The kind RopeTypeName names; nullopt for any other string.
std::optional<RopeType> ParseRopeType(std::string_view name);

struct RopeParams {
  RopeType type = RopeType::kNormal;
  uint32_t n_rot = 0;  // rotated channels per head (the rest pass through); 0 = head_dim
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // linear position scaling (1 = none)

  bool operator==(const RopeParams&) const = default;
};

// Rotates `n_tokens` rows laid out [token][head][channel] in place; token t sits at position
// pos_begin + t. `inverse` rotates back (undoes the embedding). A kind RopeRotatesKeys says
// no to leaves the rows alone.
void RotateRows(const RopeParams& params, float* rows, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim,
                int32_t pos_begin, bool inverse);

// Cos/sin of every (position, pair) of a token range, applied to any number of layers and
// heads: decoders rotate every layer's keys at the same positions. The values are those of
// RotateRows; they depend only on the absolute position, so they are computed in aligned
// blocks of kBlockTokens positions kept in a small process-wide cache (every chunk of a
// long prefix and every repeat of one reuses them instead of calling sin/cos again). For a kind
// RopeRotatesKeys says no to, the table holds nothing and rotates nothing.
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
