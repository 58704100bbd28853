#include "codecs/planes/planes_codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/byte_io.h"
#include "base/hash.h"
#include "entropy/block.h"
#include "entropy/varint.h"

namespace kvc {
namespace {

// Sections 'K' then 'V' (KvSectionTag; 'K' alone for a keys-only cache). Each holds, for every
// layer in turn and every byte plane of that layer (the most significant first), a varint length
// and an entropy block (entropy/block.h) of the plane: byte `width - 1 - p` of each value of the
// layer, in the layer's order [token][kv_head][channel]. Layout in docs/format.md.
constexpr const char* kLevel = "lossless";
constexpr size_t kMaxWidth = 4;

static_assert(std::endian::native == std::endian::little, "planes codec assumes a little-endian host");

// DEFLATE's fastest level: on the test models' KV it codes the planes within 0.5% of level 6's
// size (smaller on fp16) at a fraction of the time.
constexpr int kDeflateLevel = 1;
// The planes below the one holding sign and exponent are mostly mantissa, close to uniform. rANS
// is tried on one only when its histogram promises to save 1/kMinGainDenominator of it (decoding
// a stored plane is a copy), DEFLATE only when 1/kRepeatDenominator of the layer's token rows
// repeat an earlier row bit for bit: what DEFLATE finds there (layer 0's V is a function of the
// token alone, so each repeated token repeats its row).
constexpr double kMinGainDenominator = 64;
constexpr uint32_t kRepeatDenominator = 16;

using Planes = std::array<std::span<uint8_t>, kMaxWidth>;

// Plane p receives byte (width - 1 - p) of every value: plane 0 holds the sign and exponent.
// One load per value and shifts, which compilers vectorise; width is 2 or 4.
void SplitPlanes(const uint8_t* values, size_t n, size_t width, const Planes& planes) {
  if (width == 2) {
    uint8_t* hi = planes[0].data();
    uint8_t* lo = planes[1].data();
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, values + 2 * i, 2);
      hi[i] = static_cast<uint8_t>(v >> 8);
      lo[i] = static_cast<uint8_t>(v);
    }
    return;
  }
  uint8_t* b3 = planes[0].data();
  uint8_t* b2 = planes[1].data();
  uint8_t* b1 = planes[2].data();
  uint8_t* b0 = planes[3].data();
  for (size_t i = 0; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, values + 4 * i, 4);
    b3[i] = static_cast<uint8_t>(v >> 24);
    b2[i] = static_cast<uint8_t>(v >> 16);
    b1[i] = static_cast<uint8_t>(v >> 8);
    b0[i] = static_cast<uint8_t>(v);
  }
}

void MergePlanes(const Planes& planes, size_t n, size_t width, uint8_t* values) {
  if (width == 2) {
    const uint8_t* hi = planes[0].data();
    const uint8_t* lo = planes[1].data();
    for (size_t i = 0; i < n; ++i) {
      const auto v = static_cast<uint16_t>(lo[i] | hi[i] << 8);
      std::memcpy(values + 2 * i, &v, 2);
    }
    return;
  }
  const uint8_t* b3 = planes[0].data();
  const uint8_t* b2 = planes[1].data();
  const uint8_t* b1 = planes[2].data();
  const uint8_t* b0 = planes[3].data();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v = uint32_t{b3[i]} << 24 | uint32_t{b2[i]} << 16 | uint32_t{b1[i]} << 8 | b0[i];
    std::memcpy(values + 4 * i, &v, 4);
  }
}

// Whether 1/kRepeatDenominator of the token rows repeat an earlier row. A hash collision only
// makes DEFLATE be tried for nothing.
bool RowsRepeat(const uint8_t* values, uint32_t tokens, size_t row_bytes) {
  if (tokens < 2) return false;
  std::vector<Hash128> hashes(tokens);
  for (uint32_t t = 0; t < tokens; ++t) hashes[t] = Xxh3_128(values + size_t{t} * row_bytes, row_bytes);
  std::sort(hashes.begin(), hashes.end());
  uint32_t repeats = 0;
  for (uint32_t t = 1; t < tokens; ++t) repeats += hashes[t] == hashes[t - 1] ? 1 : 0;
  return uint64_t{repeats} * kRepeatDenominator >= tokens;
}

// What an order-0 coder would need for the plane, its table aside.
double Order0Bytes(std::span<const uint8_t> plane) {
  std::array<uint64_t, 256> counts{};
  for (uint8_t b : plane) ++counts[b];
  const auto n = static_cast<double>(plane.size());
  double bits = 0;
  for (uint64_t c : counts) {
    if (c != 0) bits += static_cast<double>(c) * std::log2(n / static_cast<double>(c));
  }
  return bits / 8;
}

// The smallest block among the methods worth trying; stored when none shrinks the plane.
Result<std::vector<uint8_t>> EncodePlane(std::span<const uint8_t> plane, bool exponent_plane, bool rows_repeat) {
  const auto n = static_cast<double>(plane.size());
  const bool try_rans = exponent_plane || Order0Bytes(plane) <= n - n / kMinGainDenominator;
  ASSIGN_OR_RETURN(std::vector<uint8_t> best,
                   EncodeBlock(plane, try_rans ? EntropyMethod::kRans : EntropyMethod::kStored));
  if (exponent_plane || rows_repeat) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> deflated, EncodeBlock(plane, EntropyMethod::kDeflate, kDeflateLevel));
    if (deflated.size() < best.size()) best = std::move(deflated);
  }
  return best;
}

}  // namespace

const CodecInfo& PlanesCodec::info() const {
  static const CodecInfo info{
      .name = "planes",
      .id = kId,
      .version = 1,
      .levels = {kLevel},
      .default_level = kLevel,
      .description =
          "lossless in the cache's own dtype (f16, bf16, f32): byte planes, each rANS or DEFLATE coded "
          "or stored, whichever is smallest",
      .params = {},
      .needs_calibration = false,
      .keeps_non_finite = true,
      .lossless = true,
  };
  return info;
}

Result<EncodedKv> PlanesCodec::Encode(const KvView& kv, const EncodeOptions& options, const CodecContext&) const {
  RETURN_IF_ERROR(CheckKnownParams(options, {}));
  if (!options.level.empty() && options.level != kLevel) {
    return InvalidArgument("unknown level '" + options.level + "' (planes levels: lossless)");
  }
  const KvShape shape = kv.shape();
  const size_t width = DTypeSize(kv.dtype());
  if (width != 2 && width != 4) return Unsupported(FormatMessage("%s values", DTypeName(kv.dtype())));
  const size_t n = shape.layer_elems();
  std::vector<uint8_t> scratch(width * n);
  Planes planes{};
  for (size_t p = 0; p < width; ++p) planes[p] = std::span(scratch).subspan(p * n, n);

  EncodedKv out;
  out.level = kLevel;
  for (KvKind kind : shape.kinds()) {
    ByteWriter w;
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      const uint8_t* values = kv.LayerBytes(kind, l).data();
      SplitPlanes(values, n, width, planes);
      const bool rows_repeat = RowsRepeat(values, shape.n_tokens, shape.row_elems() * width);
      for (size_t p = 0; p < width; ++p) {
        ASSIGN_OR_RETURN(const std::vector<uint8_t> block, EncodePlane(planes[p], p == 0, rows_repeat));
        PutVarint(&w, block.size());
        w.Bytes(block);
      }
    }
    out.sections.push_back({KvSectionTag(kind), w.Take()});
  }
  return out;
}

Status PlanesCodec::DecodeInto(const KvcFile& file, const CodecContext&, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  KVC_CHECK_CORRUPT(h.level == kLevel, "level '%s' is not lossless", h.level.c_str());
  KVC_CHECK_CORRUPT(h.codec_params.empty(), "planes takes no params, the header holds %zu bytes",
                    h.codec_params.size());
  // The planes are merged straight into the output's bytes: its shape and width must be the file's.
  if (out.dtype() != h.dtype) {
    return InvalidArgument(FormatMessage("decoding %s into a %s cache", DTypeName(h.dtype), DTypeName(out.dtype())));
  }
  if (out.shape() != h.shape) return InvalidArgument("decoding into a cache of another shape");
  ASSIGN_OR_RETURN(const auto sections, KvSections(file));
  const size_t width = DTypeSize(h.dtype);
  KVC_CHECK_CORRUPT(width == 2 || width == 4, "%s values", DTypeName(h.dtype));
  const size_t n = h.shape.layer_elems();
  std::vector<uint8_t> scratch(width * n);
  Planes planes{};
  for (size_t p = 0; p < width; ++p) planes[p] = std::span(scratch).subspan(p * n, n);
  for (KvKind kind : h.shape.kinds()) {
    ByteReader r(SectionOf(sections, kind));
    for (uint32_t l = 0; l < h.shape.n_layers; ++l) {
      for (size_t p = 0; p < width; ++p) {
        uint64_t length = 0;
        std::span<const uint8_t> block;
        RETURN_IF_ERROR(ReadVarint(&r, r.remaining(), &length, "plane block length"));
        RETURN_IF_ERROR(r.Bytes(length, &block, "plane block"));
        // DecodeBlockInto checks the size the block declares against the plane's before decoding.
        if (Status s = DecodeBlockInto(block, planes[p]); !s.ok()) {
          return s.WithContext(FormatMessage("%s layer %u plane %zu", KvKindName(kind), l, p));
        }
      }
      MergePlanes(planes, n, width, out.RowBytes(kind, l, 0, h.shape.n_tokens).data());
    }
    KVC_CHECK_CORRUPT(r.empty(), "section %s holds %zu bytes after its last plane", KvKindName(kind), r.remaining());
  }
  return Status::Ok();
}

}  // namespace kvc
