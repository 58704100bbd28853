#include "codecs/rotquant/rotquant_codec.h"

#include <algorithm>

#include "base/byte_io.h"
#include "base/half.h"
#include "codecs/rotquant/rotquant_kernels.h"

namespace kvc {
namespace {

// Sections 'K' then 'V' (KvSectionTag; 'K' alone for a keys-only cache). Each holds, for every
// layer in turn:
//   top:    fp16, the largest vector RMS of the layer (rounded up), finite and not negative
//   scales: n_tokens x n_kv_heads bytes ([token][head]); vector scale = top * 2^(-code / 16),
//           code 255: a zero vector
//   codes:  n_tokens x n_kv_heads x head_dim codes of `bits` bits, LSB first, the layer's
//           last byte padded with zero bits
// The rotation, the levels a code stands for and the packing: rotquant_kernels.h.
using rotquant::kMaxBits;
using rotquant::kMinBits;

struct RotQuantParams {
  uint32_t bits = 3;
  uint32_t seed = RotQuantCodec::kDefaultSeed;
};

// Codec params blob: u8 bits, u32 seed (5 bytes).
std::vector<uint8_t> WriteParams(const RotQuantParams& p) {
  ByteWriter w;
  w.U8(static_cast<uint8_t>(p.bits));
  w.U32(p.seed);
  return w.Take();
}

Result<RotQuantParams> ParseParams(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  uint8_t bits;
  RotQuantParams p;
  RETURN_IF_ERROR(r.U8(&bits, "params.bits"));
  RETURN_IF_ERROR(r.U32(&p.seed, "params.seed"));
  KVC_CHECK_CORRUPT(r.empty(), "params hold %zu bytes, expected 5", bytes.size());
  KVC_CHECK_CORRUPT(bits >= kMinBits && bits <= kMaxBits, "params: bits %u is not 2, 3 or 4", bits);
  p.bits = bits;
  return p;
}

Result<RotQuantParams> ParseOptions(const EncodeOptions& options) {
  static constexpr std::string_view kKnown[] = {"seed"};
  RETURN_IF_ERROR(CheckKnownParams(options, kKnown));
  RotQuantParams p;
  if (options.level.empty() || options.level == "3") {
    p.bits = 3;
  } else if (options.level == "4") {
    p.bits = 4;
  } else if (options.level == "2") {
    p.bits = 2;
  } else {
    return InvalidArgument("unknown level '" + options.level + "' (rotquant levels: 4, 3, 2)");
  }
  ASSIGN_OR_RETURN(p.seed, ParamU32(options, "seed", RotQuantCodec::kDefaultSeed, 0, UINT32_MAX));
  return p;
}

// Byte sizes of one layer's block, from the shape alone (ValidateShape bounds every factor).
struct LayerLayout {
  uint64_t vectors = 0;
  uint64_t code_bytes = 0;
  uint64_t block_bytes() const { return 2 + vectors + code_bytes; }
};

LayerLayout LayoutOf(const KvShape& shape, uint32_t bits) {
  LayerLayout l;
  l.vectors = uint64_t{shape.n_tokens} * shape.n_kv_heads;
  l.code_bytes = (l.vectors * shape.head_dim * bits + 7) / 8;
  return l;
}

// A layer's fp16 values where the view holds them as such (and aligned, as a KvCache's are): the
// encoder converts them as it rotates instead of in a pass of its own.
const uint16_t* Fp16Layer(const KvView& kv, KvKind kind, uint32_t layer) {
  if (kv.dtype() != DType::kF16) return nullptr;
  const uint8_t* bytes = kv.LayerBytes(kind, layer).data();
  return reinterpret_cast<uintptr_t>(bytes) % alignof(uint16_t) == 0 ? reinterpret_cast<const uint16_t*>(bytes)
                                                                     : nullptr;
}

}  // namespace

const CodecInfo& RotQuantCodec::info() const {
  static const CodecInfo info{
      .name = "rotquant",
      .id = kId,
      .version = 1,
      .levels = {"4", "3", "2"},
      .default_level = "3",
      .description =
          "calibration-free: seeded random Hadamard rotation per head, then Lloyd-Max scalar quantisation "
          "of each vector at 4, 3 or 2 bits against its own RMS",
      .params = {"seed=" + std::to_string(kDefaultSeed)},
  };
  return info;
}

Result<EncodedKv> RotQuantCodec::Encode(const KvView& kv, const EncodeOptions& options, const CodecContext&) const {
  ASSIGN_OR_RETURN(const RotQuantParams p, ParseOptions(options));
  const KvShape shape = kv.shape();
  const uint32_t dim = shape.head_dim;
  const LayerLayout layout = LayoutOf(shape, p.bits);
  rotquant::LayerCoder coder(dim, shape.n_kv_heads, p.bits);

  EncodedKv out;
  out.level = std::to_string(p.bits);
  out.params = WriteParams(p);
  std::vector<float> x(kv.dtype() == DType::kF16 ? 0 : shape.layer_elems());
  for (KvKind kind : shape.kinds()) {
    KvcSection& section = out.sections.emplace_back();
    section.tag = KvSectionTag(kind);
    section.bytes.assign(layout.block_bytes() * shape.n_layers, 0);
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      uint8_t* block = section.bytes.data() + l * layout.block_bytes();
      if (layout.vectors == 0) continue;  // top 0, no scales, no codes
      uint8_t* scale_codes = block + 2;
      uint8_t* codes = scale_codes + layout.vectors;
      coder.SetSigns(p.seed, static_cast<uint32_t>(kind), l);
      uint16_t top_h;
      if (const uint16_t* fp16 = Fp16Layer(kv, kind, l)) {
        top_h = coder.CodeFp16(fp16, layout.vectors, scale_codes, codes);
      } else {
        if (x.empty()) x.resize(shape.layer_elems());  // an fp16 view not aligned to 2 bytes
        kv.ReadLayerF32(kind, l, x.data());
        top_h = coder.Code(x.data(), layout.vectors, scale_codes, codes);
      }
      block[0] = static_cast<uint8_t>(top_h);
      block[1] = static_cast<uint8_t>(top_h >> 8);
    }
  }
  return out;
}

Status RotQuantCodec::DecodeInto(const KvcFile& file, const CodecContext&, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  ASSIGN_OR_RETURN(const RotQuantParams p, ParseParams(h.codec_params));
  KVC_CHECK_CORRUPT(h.level == std::to_string(p.bits), "level '%s' disagrees with params.bits %u", h.level.c_str(),
                    p.bits);
  ASSIGN_OR_RETURN(const auto sections, KvSections(file));
  const KvShape& shape = h.shape;
  const LayerLayout layout = LayoutOf(shape, p.bits);
  // Only the kinds the header claims: KvSections has checked there are exactly those sections.
  for (KvKind kind : shape.kinds()) {
    const uint64_t expected = layout.block_bytes() * shape.n_layers;
    KVC_CHECK_CORRUPT(SectionOf(sections, kind).size() == expected,
                      "section %s holds %zu bytes, the shape implies %llu", KvKindName(kind),
                      SectionOf(sections, kind).size(), static_cast<unsigned long long>(expected));
  }
  if (layout.vectors == 0) return Status::Ok();

  rotquant::LayerCoder coder(shape.head_dim, shape.n_kv_heads, p.bits);
  std::vector<float> x(out.dtype() == DType::kF16 ? 0 : shape.layer_elems());
  for (KvKind kind : shape.kinds()) {
    const auto section = SectionOf(sections, kind);
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      const uint8_t* block = section.data() + l * layout.block_bytes();
      const uint16_t top_h = static_cast<uint16_t>(block[0] | (block[1] << 8));
      KVC_CHECK_CORRUPT((top_h & 0x7c00) != 0x7c00 && (top_h & 0x8000) == 0,
                        "%s layer %u: the top scale is inf, NaN or negative", KvKindName(kind), l);
      const uint8_t* scale_codes = block + 2;
      const uint8_t* codes = scale_codes + layout.vectors;
      KVC_CHECK_CORRUPT(coder.PaddingIsZero(codes, layout.vectors), "%s layer %u: non-zero padding bits",
                        KvKindName(kind), l);
      coder.SetSigns(p.seed, static_cast<uint32_t>(kind), l);
      if (out.dtype() == DType::kF16) {  // straight into the cache's rows
        uint16_t* rows = reinterpret_cast<uint16_t*>(out.RowBytes(kind, l, 0, shape.n_tokens).data());
        coder.ReconstructFp16(codes, layout.vectors, scale_codes, Fp16ToFp32(top_h), rows);
      } else {
        coder.Reconstruct(codes, layout.vectors, scale_codes, Fp16ToFp32(top_h), x.data());
        out.WriteRowsF32(kind, l, 0, shape.n_tokens, x.data());
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvc
