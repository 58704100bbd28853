#include "codecs/raw/raw_codec.h"

#include <bit>
#include <cstring>

#include "base/half.h"

namespace kvc {
namespace {

// Sections, in this order: 'K' then 'V' (KvSectionTag), each the whole of K (or V) as
// little-endian fp16 in the cache's own layout [layer][token][kv_head][channel]. A keys-only
// cache has the 'K' section alone: V holds no bytes to store.
constexpr const char* kLevel = "fp16";

// Sections are copied to and from host fp16 arrays with memcpy.
static_assert(std::endian::native == std::endian::little, "raw codec assumes a little-endian host");

// Rounds to nearest even. Returns false when a finite input overflowed to inf: an fp16 copy
// that silently turned a real value into inf would poison attention downstream.
bool ToFp16(const float* in, uint16_t* out, size_t n) {
  uint32_t overflow = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    const uint16_t h = Fp32ToFp16(in[i]);
    out[i] = h;
    overflow |=
        static_cast<uint32_t>((h & 0x7fff) == 0x7c00) & static_cast<uint32_t>((bits & 0x7f800000) != 0x7f800000);
  }
  return overflow == 0;
}

}  // namespace

const CodecInfo& RawCodec::info() const {
  static const CodecInfo info{
      .name = "raw",
      .id = kId,
      .version = 1,
      .levels = {kLevel},
      .default_level = kLevel,
      .description = "uncompressed fp16 (the baseline)",
      .params = {},
      .needs_calibration = false,
      .keeps_non_finite = true,
      .lossless = true,
  };
  return info;
}

Result<EncodedKv> RawCodec::Encode(const KvView& kv, const EncodeOptions& options, const CodecContext&) const {
  RETURN_IF_ERROR(CheckKnownParams(options, {}));
  if (!options.level.empty() && options.level != kLevel) {
    return InvalidArgument("unknown level '" + options.level + "' (raw levels: fp16)");
  }
  const KvShape shape = kv.shape();
  const size_t layer_elems = shape.layer_elems();

  EncodedKv out;
  out.level = kLevel;
  std::vector<float> f32;
  if (kv.dtype() != DType::kF16) f32.resize(layer_elems);
  for (KvKind kind : shape.kinds()) {
    KvcSection& section = out.sections.emplace_back();
    section.tag = KvSectionTag(kind);
    section.bytes.resize(shape.elems() * 2);
    // Zero tokens: empty sections, and no (possibly null) buffers to hand to memcpy.
    if (layer_elems == 0) continue;
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      uint8_t* dst = section.bytes.data() + size_t{l} * layer_elems * 2;
      if (kv.dtype() == DType::kF16) {
        const auto src = kv.LayerBytes(kind, l);
        std::memcpy(dst, src.data(), src.size());
        continue;
      }
      kv.ReadLayerF32(kind, l, f32.data());
      // The section buffer comes from operator new and every layer starts at an even offset,
      // so it is suitably aligned for uint16_t.
      if (!ToFp16(f32.data(), reinterpret_cast<uint16_t*>(dst), layer_elems)) {
        return InvalidArgument(
            FormatMessage("%s layer %u holds a value beyond fp16 range (|x| > 65504)", KvKindName(kind), l));
      }
    }
  }
  return out;
}

Status RawCodec::DecodeInto(const KvcFile& file, const CodecContext&, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  KVC_CHECK_CORRUPT(h.level == kLevel, "level '%s' is not fp16", h.level.c_str());
  KVC_CHECK_CORRUPT(h.codec_params.empty(), "raw takes no params, the header holds %zu bytes", h.codec_params.size());
  ASSIGN_OR_RETURN(const auto sections, KvSections(file));
  const size_t layer_elems = h.shape.layer_elems();
  const uint64_t expected = uint64_t{h.shape.elems()} * 2;
  // Only the kinds the header claims: KvSections has checked there are exactly those sections.
  for (KvKind kind : h.shape.kinds()) {
    KVC_CHECK_CORRUPT(SectionOf(sections, kind).size() == expected,
                      "section %s holds %zu bytes, the shape implies %llu", KvKindName(kind),
                      SectionOf(sections, kind).size(), static_cast<unsigned long long>(expected));
  }

  if (layer_elems == 0) return Status::Ok();
  std::vector<uint16_t> f16;
  std::vector<float> f32;
  if (h.dtype != DType::kF16) {
    f16.resize(layer_elems);
    f32.resize(layer_elems);
  }
  for (KvKind kind : h.shape.kinds()) {
    const auto bytes = SectionOf(sections, kind);
    for (uint32_t l = 0; l < h.shape.n_layers; ++l) {
      const uint8_t* src = bytes.data() + size_t{l} * layer_elems * 2;
      if (h.dtype == DType::kF16) {
        std::memcpy(out.RowBytes(kind, l, 0, h.shape.n_tokens).data(), src, layer_elems * 2);
        continue;
      }
      // Section bytes may sit at any offset of the caller's buffer: copy before reading u16s.
      std::memcpy(f16.data(), src, layer_elems * 2);
      Fp16ToFp32(f16.data(), f32.data(), layer_elems);
      out.WriteRowsF32(kind, l, 0, h.shape.n_tokens, f32.data());
    }
  }
  return Status::Ok();
}

}  // namespace kvc
