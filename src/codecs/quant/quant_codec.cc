#include "codecs/quant/quant_codec.h"

#include <algorithm>
#include <cstring>

#include "base/byte_io.h"
#include "base/half.h"

namespace kvc {
namespace {

// Sections, in this order: 'K' then 'V' (KvSectionTag; 'K' alone for a keys-only cache). Each
// holds, for every layer in turn,
//   stats: n_groups x {min fp16, scale fp16}, little-endian
//   codes: layer_elems codes of `bits` bits in the layer's element order [token][channel];
//          4-bit codes two per byte, low nibble first, a final odd nibble padded with 0.
// Key groups are ordered [token_group][channel], value groups [token][channel_group].
// Element x of a group decodes to min + code * scale (in fp32), clamped to +-65504.
constexpr float kFp16Max = 65504.0f;
constexpr size_t kStatBytes = 4;

struct QuantParams {
  uint32_t bits = 8;
  uint32_t group_size = QuantCodec::kDefaultGroupSize;
};

// Codec params blob: u8 bits, u32 group_size (5 bytes).
std::vector<uint8_t> WriteParams(const QuantParams& p) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(p.bits));
  w.U32(p.group_size);
  return w.Take();
}

Result<QuantParams> ParseParams(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  uint8_t bits;
  QuantParams p;
  RETURN_IF_ERROR(r.U8(&bits, "params.bits"));
  RETURN_IF_ERROR(r.U32(&p.group_size, "params.group_size"));
  KVC_CHECK_CORRUPT(r.empty(), "params hold %zu bytes, expected 5", bytes.size());
  KVC_CHECK_CORRUPT(bits == 4 || bits == 8, "params: bits %u is not 4 or 8", bits);
  KVC_CHECK_CORRUPT(p.group_size >= 1 && p.group_size <= QuantCodec::kMaxGroupSize,
                    "params: group_size %u outside 1..%u", p.group_size, QuantCodec::kMaxGroupSize);
  p.bits = bits;
  return p;
}

// Byte sizes of one layer's block in a section, from the shape alone. Every factor is bounded
// by ValidateShape, so none of the products can overflow 64 bits.
struct LayerLayout {
  uint64_t n_groups = 0;
  uint64_t stats_bytes = 0;
  uint64_t code_bytes = 0;
  uint64_t block_bytes() const { return stats_bytes + code_bytes; }
};

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

LayerLayout LayoutOf(KvKind kind, const KvShape& shape, const QuantParams& p) {
  const uint64_t tokens = shape.n_tokens;
  const uint64_t channels = shape.row_elems();
  LayerLayout l;
  l.n_groups =
      kind == KvKind::kKey ? CeilDiv(tokens, p.group_size) * channels : tokens * CeilDiv(channels, p.group_size);
  l.stats_bytes = l.n_groups * kStatBytes;
  l.code_bytes = CeilDiv(tokens * channels * p.bits, 8);
  return l;
}

// One group's stored (min, scale) and the fp32 values both encoder and decoder derive from
// them: the encoder quantises against exactly what the decoder will multiply by.
struct GroupStat {
  uint16_t min_h;
  uint16_t scale_h;
};

inline GroupStat MakeStat(float lo, float hi, float levels, float* min_out, float* inv_scale_out) {
  GroupStat st;
  // + 0.0f turns -0 into +0: which zero a min reduction returns depends on its evaluation
  // order (vectorised or not), and the stored bytes must not.
  st.min_h = Fp32ToFp16Down(lo + 0.0f);
  const float m = Fp16ToFp32(st.min_h);
  // And again for the scale: hi - m is -0 when the group holds only -0, and a scale with its sign
  // bit set is what the decoder rejects.
  st.scale_h = Fp32ToFp16Up((hi - m) / levels + 0.0f);
  const float s = Fp16ToFp32(st.scale_h);
  *min_out = m;
  // scale 0 (a constant group whose value is an exact fp16): every code is 0.
  *inv_scale_out = s > 0.0f ? 1.0f / s : 0.0f;
  return st;
}

// x >= m holds for every element of the group, so 0 <= v <= levels < 2^23, where adding and
// subtracting 2^23 rounds to nearest even exactly, unlike truncating v + 0.5 (0.49999997 + 0.5
// is 1.0 in fp32); and unlike std::nearbyint it vectorises without SSE4.1.
inline uint8_t QuantiseOne(float x, float m, float inv_scale, float levels) {
  const float v = std::min((x - m) * inv_scale, levels);
  return static_cast<uint8_t>((v + 0x1.0p23f) - 0x1.0p23f);
}

void PutStat(uint8_t* p, GroupStat st) {
  p[0] = static_cast<uint8_t>(st.min_h);
  p[1] = static_cast<uint8_t>(st.min_h >> 8);
  p[2] = static_cast<uint8_t>(st.scale_h);
  p[3] = static_cast<uint8_t>(st.scale_h >> 8);
}

// Per channel: groups of group_size consecutive tokens of one channel.
void QuantiseKeys(const float* x, uint32_t tokens, size_t channels, uint32_t group, float levels, uint8_t* stats,
                  uint8_t* codes, std::vector<float>& lo, std::vector<float>& hi) {
  lo.resize(channels);
  hi.resize(channels);
  for (uint32_t t0 = 0; t0 < tokens; t0 += group) {
    const uint32_t t1 = std::min(tokens, t0 + group);
    std::copy_n(x + size_t{t0} * channels, channels, lo.data());
    std::copy_n(x + size_t{t0} * channels, channels, hi.data());
    for (uint32_t t = t0 + 1; t < t1; ++t) {
      const float* row = x + size_t{t} * channels;
      for (size_t c = 0; c < channels; ++c) {
        lo[c] = std::min(lo[c], row[c]);
        hi[c] = std::max(hi[c], row[c]);
      }
    }
    // lo/hi are reused to hold the dequantisation min and 1/scale of each channel.
    for (size_t c = 0; c < channels; ++c) {
      PutStat(stats, MakeStat(lo[c], hi[c], levels, &lo[c], &hi[c]));
      stats += kStatBytes;
    }
    for (uint32_t t = t0; t < t1; ++t) {
      const float* row = x + size_t{t} * channels;
      uint8_t* out = codes + size_t{t} * channels;
      for (size_t c = 0; c < channels; ++c) out[c] = QuantiseOne(row[c], lo[c], hi[c], levels);
    }
  }
}

// Per token: groups of group_size consecutive channels of one token's row.
void QuantiseValues(const float* x, uint32_t tokens, size_t channels, uint32_t group, float levels, uint8_t* stats,
                    uint8_t* codes) {
  for (uint32_t t = 0; t < tokens; ++t) {
    const float* row = x + size_t{t} * channels;
    uint8_t* out = codes + size_t{t} * channels;
    for (size_t c0 = 0; c0 < channels; c0 += group) {
      const size_t c1 = std::min(channels, c0 + group);
      float lo = row[c0];
      float hi = row[c0];
      for (size_t c = c0 + 1; c < c1; ++c) {
        lo = std::min(lo, row[c]);
        hi = std::max(hi, row[c]);
      }
      float m;
      float inv;
      PutStat(stats, MakeStat(lo, hi, levels, &m, &inv));
      stats += kStatBytes;
      for (size_t c = c0; c < c1; ++c) out[c] = QuantiseOne(row[c], m, inv, levels);
    }
  }
}

void Pack4(const uint8_t* codes, size_t n, uint8_t* out) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  if (n % 2 != 0) out[pairs] = codes[n - 1];
}

// Fails on a non-zero padding nibble: the encoder never writes one, so the bytes are damaged.
bool Unpack4(const uint8_t* in, size_t n, uint8_t* codes) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    codes[2 * i] = in[i] & 15;
    codes[2 * i + 1] = in[i] >> 4;
  }
  if (n % 2 != 0) {
    codes[n - 1] = in[pairs] & 15;
    return (in[pairs] >> 4) == 0;
  }
  return true;
}

// Reads a layer's stats into fp32 (min, scale). A stored min or scale that is inf/NaN, or a
// negative scale, is something no encoder writes and would decode to garbage.
bool ReadStats(const uint8_t* p, size_t n_groups, float* mins, float* scales) {
  uint32_t bad = 0;
  for (size_t g = 0; g < n_groups; ++g, p += kStatBytes) {
    const uint16_t min_h = static_cast<uint16_t>(p[0] | (p[1] << 8));
    const uint16_t scale_h = static_cast<uint16_t>(p[2] | (p[3] << 8));
    bad |= static_cast<uint32_t>((min_h & 0x7c00) == 0x7c00) | static_cast<uint32_t>((scale_h & 0x7c00) == 0x7c00) |
           static_cast<uint32_t>((scale_h & 0x8000) != 0);
    mins[g] = Fp16ToFp32(min_h);
    scales[g] = Fp16ToFp32(scale_h);
  }
  return bad == 0;
}

inline float DequantiseOne(uint8_t q, float m, float s) {
  return std::clamp(m + static_cast<float>(q) * s, -kFp16Max, kFp16Max);
}

void DequantiseKeys(const uint8_t* codes, uint32_t tokens, size_t channels, uint32_t group, const float* mins,
                    const float* scales, float* out) {
  for (uint32_t t0 = 0, g = 0; t0 < tokens; t0 += group, ++g) {
    const uint32_t t1 = std::min(tokens, t0 + group);
    const float* m = mins + size_t{g} * channels;
    const float* s = scales + size_t{g} * channels;
    for (uint32_t t = t0; t < t1; ++t) {
      const uint8_t* q = codes + size_t{t} * channels;
      float* row = out + size_t{t} * channels;
      for (size_t c = 0; c < channels; ++c) row[c] = DequantiseOne(q[c], m[c], s[c]);
    }
  }
}

void DequantiseValues(const uint8_t* codes, uint32_t tokens, size_t channels, uint32_t group, const float* mins,
                      const float* scales, float* out) {
  size_t g = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    const uint8_t* q = codes + size_t{t} * channels;
    float* row = out + size_t{t} * channels;
    for (size_t c0 = 0; c0 < channels; c0 += group, ++g) {
      const size_t c1 = std::min(channels, c0 + group);
      const float m = mins[g];
      const float s = scales[g];
      for (size_t c = c0; c < c1; ++c) row[c] = DequantiseOne(q[c], m, s);
    }
  }
}

Result<QuantParams> ParseOptions(const EncodeOptions& options) {
  static constexpr std::string_view kKnown[] = {"group_size"};
  RETURN_IF_ERROR(CheckKnownParams(options, kKnown));
  QuantParams p;
  if (options.level.empty() || options.level == "8") {
    p.bits = 8;
  } else if (options.level == "4") {
    p.bits = 4;
  } else {
    return InvalidArgument("unknown level '" + options.level + "' (quant levels: 8, 4)");
  }
  ASSIGN_OR_RETURN(p.group_size,
                   ParamU32(options, "group_size", QuantCodec::kDefaultGroupSize, 1, QuantCodec::kMaxGroupSize));
  return p;
}

}  // namespace

const CodecInfo& QuantCodec::info() const {
  static const CodecInfo info{
      .name = "quant",
      .id = kId,
      .version = 1,
      .levels = {"8", "4"},
      .default_level = "8",
      .description = "KIVI-style asymmetric quantisation: keys per channel, values per token",
      .params = {"group_size=128"},
  };
  return info;
}

Result<EncodedKv> QuantCodec::Encode(const KvView& kv, const EncodeOptions& options, const CodecContext&) const {
  ASSIGN_OR_RETURN(const QuantParams p, ParseOptions(options));
  const KvShape shape = kv.shape();
  const uint32_t tokens = shape.n_tokens;
  const size_t channels = shape.row_elems();
  const size_t layer_elems = shape.layer_elems();
  const float levels = static_cast<float>((1u << p.bits) - 1);

  EncodedKv out;
  out.level = std::to_string(p.bits);
  out.params = WriteParams(p);
  std::vector<float> x(layer_elems);
  std::vector<uint8_t> codes(p.bits == 4 ? layer_elems : 0);
  std::vector<float> lo;
  std::vector<float> hi;
  for (KvKind kind : shape.kinds()) {
    const LayerLayout layout = LayoutOf(kind, shape, p);
    KvcSection& section = out.sections.emplace_back();
    section.tag = KvSectionTag(kind);
    section.bytes.resize(layout.block_bytes() * shape.n_layers);
    // Zero tokens: empty sections, and no (possibly null) buffers to hand to memcpy.
    if (layer_elems == 0) continue;
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      uint8_t* stats = section.bytes.data() + l * layout.block_bytes();
      uint8_t* code_bytes = stats + layout.stats_bytes;
      kv.ReadLayerF32(kind, l, x.data());
      if (!AllInFp16Range(x.data(), layer_elems)) {
        return InvalidArgument(FormatMessage("%s layer %u holds NaN, inf or a value beyond fp16 range (|x| > 65504)",
                                             KvKindName(kind), l));
      }
      // 8-bit codes go straight into the section; 4-bit ones are packed afterwards.
      uint8_t* dst = p.bits == 8 ? code_bytes : codes.data();
      if (kind == KvKind::kKey) {
        QuantiseKeys(x.data(), tokens, channels, p.group_size, levels, stats, dst, lo, hi);
      } else {
        QuantiseValues(x.data(), tokens, channels, p.group_size, levels, stats, dst);
      }
      if (p.bits == 4) Pack4(codes.data(), layer_elems, code_bytes);
    }
  }
  return out;
}

Status QuantCodec::DecodeInto(const KvcFile& file, const CodecContext&, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  ASSIGN_OR_RETURN(const QuantParams p, ParseParams(h.codec_params));
  KVC_CHECK_CORRUPT(h.level == std::to_string(p.bits), "level '%s' disagrees with params.bits %u", h.level.c_str(),
                    p.bits);
  ASSIGN_OR_RETURN(const auto sections, KvSections(file));
  const KvShape& shape = h.shape;
  // Only the kinds the header claims: KvSections has checked there are exactly those sections.
  for (KvKind kind : shape.kinds()) {
    const uint64_t expected = LayoutOf(kind, shape, p).block_bytes() * shape.n_layers;
    KVC_CHECK_CORRUPT(SectionOf(sections, kind).size() == expected,
                      "section %s holds %zu bytes, the shape implies %llu", KvKindName(kind),
                      SectionOf(sections, kind).size(), static_cast<unsigned long long>(expected));
  }

  if (shape.n_tokens == 0) return Status::Ok();
  const uint32_t tokens = shape.n_tokens;
  const size_t channels = shape.row_elems();
  const size_t layer_elems = shape.layer_elems();
  std::vector<float> x(layer_elems);
  std::vector<uint8_t> codes(p.bits == 4 ? layer_elems : 0);
  std::vector<float> mins;
  std::vector<float> scales;
  for (KvKind kind : shape.kinds()) {
    const LayerLayout layout = LayoutOf(kind, shape, p);
    const auto section = SectionOf(sections, kind);
    mins.resize(layout.n_groups);
    scales.resize(layout.n_groups);
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      const uint8_t* stats = section.data() + l * layout.block_bytes();
      const uint8_t* code_bytes = stats + layout.stats_bytes;
      KVC_CHECK_CORRUPT(ReadStats(stats, layout.n_groups, mins.data(), scales.data()),
                        "%s layer %u: a group's min or scale is inf, NaN or negative", KvKindName(kind), l);
      const uint8_t* q = code_bytes;
      if (p.bits == 4) {
        KVC_CHECK_CORRUPT(Unpack4(code_bytes, layer_elems, codes.data()), "%s layer %u: non-zero padding nibble",
                          KvKindName(kind), l);
        q = codes.data();
      }
      if (kind == KvKind::kKey) {
        DequantiseKeys(q, tokens, channels, p.group_size, mins.data(), scales.data(), x.data());
      } else {
        DequantiseValues(q, tokens, channels, p.group_size, mins.data(), scales.data(), x.data());
      }
      out.WriteRowsF32(kind, l, 0, tokens, x.data());
    }
  }
  return Status::Ok();
}

}  // namespace kvc
