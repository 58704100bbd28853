#include "codecs/codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>

#include "base/half.h"
#include "base/hash.h"
#include "codecs/cachegen/cachegen_codec.h"
#include "codecs/kvtc/kvtc_codec.h"
#include "codecs/planes/planes_codec.h"
#include "codecs/quant/quant_codec.h"
#include "codecs/raw/raw_codec.h"
#include "codecs/rotquant/rotquant_codec.h"
#include "codecs/video/video_codec.h"

namespace kvc {
namespace {

// The one list of codecs. Explicit rather than self-registering so that linking a static
// library can never silently drop a codec. To add one: include its header, add a static
// instance and its pointer below (ids are checked for uniqueness by codec_test).
const std::vector<const Codec*>& Registry() {
  static const RawCodec raw;
  static const QuantCodec quant;
  static const KvtcCodec kvtc;
  static const CacheGenCodec cachegen;
  static const VideoCodec video;
  static const RotQuantCodec rotquant;
  static const PlanesCodec planes;
  static const std::vector<const Codec*> codecs = {&raw, &quant, &kvtc, &cachegen, &video, &rotquant, &planes};
  return codecs;
}

}  // namespace

const Codec* FindCodec(std::string_view name) {
  for (const Codec* codec : Registry()) {
    if (codec->info().name == name) return codec;
  }
  return nullptr;
}

const Codec* FindCodecById(uint16_t id) {
  for (const Codec* codec : Registry()) {
    if (codec->info().id == id) return codec;
  }
  return nullptr;
}

std::vector<const Codec*> AllCodecs() { return Registry(); }

Status CheckFinite(const KvView& kv) {
  const KvShape shape = kv.shape();
  const size_t row = shape.row_elems();
  std::vector<float> values(shape.layer_elems());
  for (KvKind kind : shape.kinds()) {
    for (uint32_t layer = 0; layer < shape.n_layers; ++layer) {
      kv.ReadLayerF32(kind, layer, values.data());
      static_assert(kMaxEncodableMagnitude == 65504.0f, "the fast test below is fp16's range");
      if (AllInFp16Range(values.data(), values.size())) continue;
      for (size_t i = 0; i < values.size(); ++i) {
        // The negated test is also true for NaN.
        if (!(std::fabs(values[i]) <= kMaxEncodableMagnitude)) {
          return InvalidArgument(
              FormatMessage("%s layer %u token %zu holds %g, outside the fp16 range every lossy "
                            "codec takes (only the raw codec stores it)",
                            KvKindName(kind), layer, i / row, static_cast<double>(values[i])));
        }
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> EncodeKvc(const Codec& codec, const KvView& kv, const EncodeOptions& options,
                                       const ModelFingerprint& fingerprint, uint32_t token_begin,
                                       const CodecContext& context) {
  const CodecInfo& info = codec.info();
  // The file will claim `fingerprint`: codecs that check their inputs against the model (kvtc's
  // calibration) must check against that one.
  CodecContext with_model = context;
  if (with_model.model == nullptr) with_model.model = &fingerprint;
  if (!info.keeps_non_finite) {
    if (Status s = CheckFinite(kv); !s.ok()) return s.WithContext(info.name);
  }
  auto encoded = codec.Encode(kv, options, with_model);
  if (!encoded.ok()) return encoded.status().WithContext(info.name);

  KvcHeader header;
  header.codec_id = info.id;
  header.codec_version = info.version;
  header.level = std::move(encoded->level);
  header.codec_params = std::move(encoded->params);
  header.shape = kv.shape();
  header.dtype = kv.dtype();
  header.model_fingerprint = fingerprint;
  header.token_begin = token_begin;
  header.pos_begin = kv.pos_begin();
  return WriteKvc(header, encoded->sections);
}

DecodeExpect& DecodeExpect::Shape(const KvShape& shape) {
  n_layers = shape.n_layers;
  n_kv_heads = shape.n_kv_heads;
  head_dim = shape.head_dim;
  n_tokens = shape.n_tokens;
  keys_only = shape.keys_only;
  return *this;
}

Status CheckDecodeExpect(const KvcHeader& h, size_t file_bytes, const DecodeExpect& expect) {
  const struct {
    const char* name;
    const std::optional<uint32_t>& want;
    uint32_t got;
  } dims[] = {{"n_layers", expect.n_layers, h.shape.n_layers},
              {"n_kv_heads", expect.n_kv_heads, h.shape.n_kv_heads},
              {"head_dim", expect.head_dim, h.shape.head_dim},
              {"n_tokens", expect.n_tokens, h.shape.n_tokens}};
  for (const auto& d : dims) {
    if (d.want && *d.want != d.got) {
      return InvalidArgument(FormatMessage("the file holds %s %u, expected %u", d.name, d.got, *d.want));
    }
  }
  if (expect.keys_only && *expect.keys_only != h.shape.keys_only) {
    return InvalidArgument(h.shape.keys_only ? "the file holds keys only, expected keys and values"
                                             : "the file holds keys and values, expected keys only");
  }
  if (expect.pos_begin && *expect.pos_begin != h.pos_begin) {
    return InvalidArgument(
        FormatMessage("the file starts at position %d, expected %d", h.pos_begin, *expect.pos_begin));
  }
  // ReadKvc has run ValidateShape, so every factor is bounded and the product fits 64 bits.
  const uint64_t output = uint64_t{h.shape.n_kinds()} * h.shape.elems() * DTypeSize(h.dtype);
  if (output > expect.max_output_bytes) {
    return InvalidArgument(FormatMessage("the file decodes to %llu bytes, more than the %llu allowed",
                                         static_cast<unsigned long long>(output),
                                         static_cast<unsigned long long>(expect.max_output_bytes)));
  }
  if (expect.max_expansion != 0) {
    uint64_t scaled;
    if (__builtin_mul_overflow(uint64_t{file_bytes}, expect.max_expansion, &scaled)) scaled = UINT64_MAX;
    const uint64_t bound = std::max(kDecodeExpansionFloorBytes, scaled);
    KVC_CHECK_CORRUPT(output <= bound, "a %zu-byte file claims %llu bytes of KV, more than %llux its size", file_bytes,
                      static_cast<unsigned long long>(output), static_cast<unsigned long long>(expect.max_expansion));
  }
  return Status::Ok();
}

namespace {

// A .kvc file parsed and vetted (fingerprint, codec, version, `expect`), ready for its codec.
struct OpenedKvc {
  KvcFile file;
  const Codec* codec = nullptr;
};

Result<OpenedKvc> OpenKvc(std::span<const uint8_t> bytes, const ModelFingerprint* expected_fingerprint,
                          const DecodeExpect& expect) {
  ASSIGN_OR_RETURN(KvcFile file, ReadKvc(bytes));
  const KvcHeader& h = file.header;
  if (expected_fingerprint != nullptr && h.model_fingerprint != *expected_fingerprint) {
    return InvalidArgument("made for another model (fingerprint " + HexString(h.model_fingerprint) +
                           " != " + HexString(*expected_fingerprint) + ")");
  }
  const Codec* codec = FindCodecById(h.codec_id);
  if (codec == nullptr) return Unsupported(FormatMessage("unknown codec id %u", h.codec_id));
  const CodecInfo& info = codec->info();
  if (h.codec_version != info.version) {
    return Unsupported(FormatMessage("codec %s version %u not supported (this build reads version %u)",
                                     info.name.c_str(), h.codec_version, info.version));
  }
  RETURN_IF_ERROR(CheckDecodeExpect(h, bytes.size(), expect));
  return OpenedKvc{std::move(file), codec};
}

// The sizes are checked, but a legitimately large file can still meet a memory limit: that is
// an error for the caller, never an exception through it.
template <typename Body>
Status NoThrowDecode(const OpenedKvc& opened, Body&& body) {
  const KvcHeader& h = opened.file.header;
  const CodecInfo& info = opened.codec->info();
  try {
    return body().WithContext(info.name);
  } catch (const std::bad_alloc&) {
    return Internal(FormatMessage(
        "%s: out of memory decoding %u tokens (%llu bytes of KV)", info.name.c_str(), h.shape.n_tokens,
        static_cast<unsigned long long>(uint64_t{h.shape.n_kinds()} * h.shape.elems() * DTypeSize(h.dtype))));
  }
}

}  // namespace

Result<KvCache> Codec::Decode(const KvcFile& file, const CodecContext& context) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  // The output is allocated before the codec has checked its sections against the shape, so the
  // header's claim is first bounded by the bytes that are there (DecodeKvc bounds it by the
  // whole file the same way).
  uint64_t section_bytes = 0;
  for (const KvcSectionView& section : file.sections) section_bytes += section.bytes.size();
  RETURN_IF_ERROR(CheckDecodeExpect(h, section_bytes, {}));
  ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(h.shape, h.dtype, h.pos_begin));
  RETURN_IF_ERROR(DecodeInto(file, context, cache.Slice()));
  return cache;
}

Result<KvCache> DecodeKvc(std::span<const uint8_t> bytes, const ModelFingerprint* expected_fingerprint,
                          const CodecContext& context, const DecodeExpect& expect) {
  ASSIGN_OR_RETURN(const OpenedKvc opened, OpenKvc(bytes, expected_fingerprint, expect));
  KvCache cache;
  RETURN_IF_ERROR(NoThrowDecode(opened, [&]() -> Status {
    ASSIGN_OR_RETURN(cache, opened.codec->Decode(opened.file, context));
    return Status::Ok();
  }));
  return cache;
}

Status DecodeKvcInto(std::span<const uint8_t> bytes, const KvSlice& out, const ModelFingerprint* expected_fingerprint,
                     const CodecContext& context, const DecodeExpect& expect) {
  // The destination's geometry and place are part of what the file must match.
  DecodeExpect want = expect;
  want.Shape(out.shape());
  want.pos_begin = out.pos_begin();
  ASSIGN_OR_RETURN(const OpenedKvc opened, OpenKvc(bytes, expected_fingerprint, want));
  return NoThrowDecode(opened, [&]() -> Status {
    if (opened.file.header.dtype == out.dtype()) return opened.codec->DecodeInto(opened.file, context, out);
    ASSIGN_OR_RETURN(const KvCache aside, opened.codec->Decode(opened.file, context));
    const KvShape& shape = aside.shape();
    std::vector<float> rows(shape.layer_elems());
    for (KvKind kind : shape.kinds()) {
      for (uint32_t l = 0; l < shape.n_layers; ++l) {
        aside.ReadRowsF32(kind, l, 0, shape.n_tokens, rows.data());
        out.WriteRowsF32(kind, l, 0, shape.n_tokens, rows.data());
      }
    }
    return Status::Ok();
  });
}

uint32_t KvSectionTag(KvKind kind) { return kind == KvKind::kKey ? 0x4B : 0x56; }

Result<std::array<std::span<const uint8_t>, 2>> KvSections(const KvcFile& file) {
  const KvShape& shape = file.header.shape;
  KVC_CHECK_CORRUPT(file.sections.size() == shape.n_kinds(), "expected %zu sections (%s), found %zu", shape.n_kinds(),
                    shape.keys_only ? "K" : "K, V", file.sections.size());
  std::array<std::span<const uint8_t>, 2> out;
  for (KvKind kind : shape.kinds()) {
    const KvcSectionView& s = file.sections[kind == KvKind::kKey ? 0 : 1];
    KVC_CHECK_CORRUPT(s.tag == KvSectionTag(kind), "section %s has tag 0x%x, expected 0x%x", KvKindName(kind), s.tag,
                      KvSectionTag(kind));
    out[kind == KvKind::kKey ? 0 : 1] = s.bytes;
  }
  return out;
}

Result<uint32_t> ParamU32(const EncodeOptions& options, const std::string& key, uint32_t default_value,
                          uint32_t min_value, uint32_t max_value) {
  const auto it = options.params.find(key);
  if (it == options.params.end()) return default_value;
  const std::string& text = it->second;
  uint64_t value = 0;
  // from_chars alone would accept a prefix ("12abc") and is silent about signs being absent;
  // requiring the whole string to be digits keeps "group_size=+8" or " 8" from meaning 8.
  const bool all_digits = !text.empty() && text.size() <= 10 &&
                          std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!all_digits || std::from_chars(text.data(), text.data() + text.size(), value).ec != std::errc()) {
    return InvalidArgument("parameter " + key + "='" + text + "' is not a decimal integer");
  }
  if (value < min_value || value > max_value) {
    return InvalidArgument(
        FormatMessage("parameter %s=%s outside %u..%u", key.c_str(), text.c_str(), min_value, max_value));
  }
  return static_cast<uint32_t>(value);
}

Status CheckKnownParams(const EncodeOptions& options, std::span<const std::string_view> known) {
  for (const auto& [key, value] : options.params) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (known.empty()) return InvalidArgument("unknown parameter '" + key + "' (this codec takes no parameters)");
    std::string message = "unknown parameter '" + key + "' (known: ";
    for (size_t i = 0; i < known.size(); ++i) {
      if (i > 0) message += ", ";
      message += known[i];
    }
    message += ")";
    return InvalidArgument(std::move(message));
  }
  return Status::Ok();
}

}  // namespace kvc
