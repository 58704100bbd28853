#include "codecs/video/video_codec.h"

#include <algorithm>
#include <array>

#include "base/byte_io.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "codecs/video/video_layout.h"
#include "libav/video_decoder.h"

namespace kvc {
namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kParamsBytes = 10;
constexpr std::array<const char*, 3> kLevelNames = {"8", "6", "4"};
constexpr std::array<uint32_t, 3> kLevelBits = {8, 6, 4};
constexpr uint32_t kMaxGroup = 65535;
constexpr size_t kScaleBytes = 4;

// Defaults chosen by measurement on models/kvtiny (docs/results.md, "video ablation").
constexpr VideoCoder kDefaultCoder = VideoCoder::kFfv1;
constexpr VideoLayout kDefaultLayout = VideoLayout::kTokenAxis;
constexpr bool kDefaultOrder = true;
constexpr bool kDefaultPlanes = false;
constexpr bool kDefaultCenter = false;
constexpr bool kDefaultTokenOrder = true;
constexpr uint32_t kDefaultGroup = VideoCodec::kDefaultGroup;

// FFV1's entropy coder by level. Golomb-Rice decodes faster than the range coder for 1-2.5%
// of the ratio at 8 and 6 bits; at 4 bits, where most residuals are 0 or +-1 and a Golomb-Rice
// code spends at least a bit on each (the range coder less), it costs 5-8%, so 4 bits keeps
// the range coder (docs/results-video-settings.md).
Ffv1Coder DefaultFfv1Coder(uint32_t level_id) {
  return kLevelBits[level_id] <= 4 ? Ffv1Coder::kRangeTable : Ffv1Coder::kGolomb;
}

struct Params {
  uint32_t level_id = 0;
  VideoCoder coder = kDefaultCoder;
  LayoutSpec layout{kDefaultLayout, kDefaultPlanes};
  bool order = kDefaultOrder;
  bool center = kDefaultCenter;
  bool token_order = kDefaultTokenOrder;
  uint32_t group = kDefaultGroup;
  // Encoder only, not stored: each stream says how it was coded.
  std::string preset = "medium";
  uint32_t slices = 0;
  Ffv1Coder ffv1_coder = Ffv1Coder::kRangeTable;
  bool ffv1_large_context = false;
  bool nvdec = false;  // streams a GPU's NVDEC decodes
  VideoEncodeOptions stream_options() const {
    return {.coder = coder,
            .preset = preset,
            .ffv1_slices = slices,
            .ffv1_coder = ffv1_coder,
            .ffv1_large_context = ffv1_large_context,
            .nvdec_sizes = nvdec};
  }
  uint32_t bits() const { return kLevelBits[level_id]; }
};

std::vector<uint8_t> WriteParams(const Params& p) {
  ByteWriter w;
  w.U8(kVersion);
  w.U8(static_cast<uint8_t>(p.bits()));
  w.U8(static_cast<uint8_t>(p.coder));
  w.U8(static_cast<uint8_t>(p.layout.layout));
  w.U8(p.order ? 1 : 0);
  w.U8(p.layout.layer_planes ? 1 : 0);
  w.U8(p.center ? 1 : 0);
  w.U8(p.token_order ? 1 : 0);
  w.U16(static_cast<uint16_t>(p.group));
  return w.Take();
}

Result<Params> ParseParams(std::span<const uint8_t> bytes) {
  KVC_CHECK_CORRUPT(bytes.size() == kParamsBytes, "params hold %zu bytes, expected %zu", bytes.size(), kParamsBytes);
  ByteReader r(bytes);
  uint8_t version, bits, coder, layout, order, planes, center, token_order;
  uint16_t group;
  RETURN_IF_ERROR(r.U8(&version, "params.version"));
  RETURN_IF_ERROR(r.U8(&bits, "params.bits"));
  RETURN_IF_ERROR(r.U8(&coder, "params.coder"));
  RETURN_IF_ERROR(r.U8(&layout, "params.layout"));
  RETURN_IF_ERROR(r.U8(&order, "params.order"));
  RETURN_IF_ERROR(r.U8(&planes, "params.planes"));
  RETURN_IF_ERROR(r.U8(&center, "params.center"));
  RETURN_IF_ERROR(r.U8(&token_order, "params.token_order"));
  RETURN_IF_ERROR(r.U16(&group, "params.group"));
  KVC_CHECK_CORRUPT(version == kVersion, "params: version %u, expected %u", version, kVersion);
  const auto* level = std::find(kLevelBits.begin(), kLevelBits.end(), bits);
  KVC_CHECK_CORRUPT(level != kLevelBits.end(), "params: %u bits is no level", bits);
  KVC_CHECK_CORRUPT(coder <= static_cast<uint8_t>(VideoCoder::kFfv1), "params: video coder %u unknown", coder);
  KVC_CHECK_CORRUPT(layout <= static_cast<uint8_t>(VideoLayout::kTokenAxis), "params: layout %u unknown", layout);
  KVC_CHECK_CORRUPT(order <= 1 && planes <= 1 && center <= 1 && token_order <= 1,
                    "params: order %u / planes %u / center %u / token_order %u not a flag", order, planes, center,
                    token_order);
  KVC_CHECK_CORRUPT(group >= 1, "params: group 0");
  Params p;
  p.level_id = static_cast<uint32_t>(level - kLevelBits.begin());
  p.coder = static_cast<VideoCoder>(coder);
  p.layout = {static_cast<VideoLayout>(layout), planes == 1};
  p.order = order == 1;
  p.center = center == 1;
  p.token_order = token_order == 1;
  p.group = group;
  return p;
}

Result<bool> ParseFlag(const EncodeOptions& options, const std::string& key, bool default_value) {
  auto it = options.params.find(key);
  if (it == options.params.end()) return default_value;
  if (it->second == "1") return true;
  if (it->second == "0") return false;
  return InvalidArgument(key + "=" + it->second + ": expected 0 or 1");
}

Result<Params> ParseOptions(const EncodeOptions& options) {
  static constexpr std::string_view kKnown[] = {"coder", "layout", "order",  "token_order", "planes",       "center",
                                                "group", "preset", "slices", "ffv1_coder",  "ffv1_context", "nvdec"};
  RETURN_IF_ERROR(CheckKnownParams(options, kKnown));
  Params p;
  if (!options.level.empty()) {
    const auto* it = std::find(kLevelNames.begin(), kLevelNames.end(), options.level);
    if (it == kLevelNames.end())
      return InvalidArgument("unknown level '" + options.level + "' (video levels: 8, 6, 4)");
    p.level_id = static_cast<uint32_t>(it - kLevelNames.begin());
  }
  if (auto it = options.params.find("coder"); it != options.params.end()) {
    const auto coder = ParseVideoCoder(it->second);
    if (!coder) return InvalidArgument("coder=" + it->second + ": expected x265, x264 or ffv1");
    p.coder = *coder;
  }
  if (auto it = options.params.find("layout"); it != options.params.end()) {
    if (it->second == "axis") {
      p.layout.layout = VideoLayout::kTokenAxis;
    } else if (it->second == "frames") {
      p.layout.layout = VideoLayout::kTokenFrames;
    } else {
      return InvalidArgument("layout=" + it->second + ": expected axis or frames");
    }
  }
  ASSIGN_OR_RETURN(p.order, ParseFlag(options, "order", kDefaultOrder));
  ASSIGN_OR_RETURN(p.layout.layer_planes, ParseFlag(options, "planes", kDefaultPlanes));
  ASSIGN_OR_RETURN(p.center, ParseFlag(options, "center", kDefaultCenter));
  ASSIGN_OR_RETURN(p.token_order, ParseFlag(options, "token_order", kDefaultTokenOrder));
  ASSIGN_OR_RETURN(p.group, ParamU32(options, "group", kDefaultGroup, 1, kMaxGroup));
  if (auto it = options.params.find("preset"); it != options.params.end()) p.preset = it->second;
  ASSIGN_OR_RETURN(p.slices, ParamU32(options, "slices", 0, 0, kMaxFfv1Slices));
  p.ffv1_coder = DefaultFfv1Coder(p.level_id);
  if (auto it = options.params.find("ffv1_coder"); it != options.params.end() && it->second != "auto") {
    const auto coder = ParseFfv1Coder(it->second);
    if (!coder) return InvalidArgument("ffv1_coder=" + it->second + ": expected auto, range, range_def or golomb");
    p.ffv1_coder = *coder;
  }
  ASSIGN_OR_RETURN(p.ffv1_large_context, ParseFlag(options, "ffv1_context", false));
  ASSIGN_OR_RETURN(p.nvdec, ParseFlag(options, "nvdec", false));
  if (p.nvdec) {
    // What NVDEC decodes (video/nvdec_decoder.h): HEVC of three planes, pictures padded to its
    // smallest side. Only the encoder needs to know: each stream's header has its coded size.
    if (options.params.count("coder") != 0 && p.coder != VideoCoder::kX265) {
      return InvalidArgument("nvdec=1 codes with x265 (NVDEC decodes HEVC), not " + options.params.at("coder"));
    }
    if (options.params.count("planes") != 0 && !p.layout.layer_planes) {
      return InvalidArgument("nvdec=1 needs planes=1: NVDEC has no gray (4:0:0) HEVC");
    }
    p.coder = VideoCoder::kX265;
    p.layout.layer_planes = true;
  }
  return p;
}

// Bytes per stored index of a permutation of n items.
size_t IndexBytes(size_t n) { return n <= 256 ? 1 : n <= 65536 ? 2 : 4; }

void PutIndex(ByteWriter* w, uint32_t v, size_t width) {
  if (width == 1) {
    w->U8(static_cast<uint8_t>(v));
  } else if (width == 2) {
    w->U16(static_cast<uint16_t>(v));
  } else {
    w->U32(v);
  }
}

Status GetIndex(ByteReader& r, size_t width, uint32_t* v) {
  if (width == 1) {
    uint8_t b;
    RETURN_IF_ERROR(r.U8(&b, "order index"));
    *v = b;
  } else if (width == 2) {
    uint16_t h;
    RETURN_IF_ERROR(r.U16(&h, "order index"));
    *v = h;
  } else {
    RETURN_IF_ERROR(r.U32(v, "order index"));
  }
  return Status::Ok();
}

std::vector<uint32_t> Identity(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// What one (kind, layer) stores beside its pixels, in this order in the section.
struct LayerSide {
  std::vector<GroupScale> scales;
  std::vector<uint8_t> centres;         // center=1: each channel's median code
  std::vector<uint32_t> channel_order;  // order=1: channel at each row/position
  std::vector<uint32_t> token_order;    // token_order=1: token at each frame/column
};

// Bytes of one layer's side information.
uint64_t SideBytes(const Params& p, uint32_t channels, uint32_t tokens) {
  const uint64_t groups = (channels + p.group - 1) / p.group;
  return groups * kScaleBytes + (p.center ? channels : 0) + (p.order ? uint64_t{channels} * IndexBytes(channels) : 0) +
         (p.token_order ? uint64_t{tokens} * IndexBytes(tokens) : 0);
}

Status EncodeKind(const KvView& kv, KvKind kind, const Params& p, ThreadPool* pool, KvcSection* section) {
  const KvShape shape = kv.shape();
  section->tag = KvSectionTag(kind);
  if (shape.layer_elems() == 0) return Status::Ok();
  const uint32_t channels = static_cast<uint32_t>(shape.row_elems());
  const uint32_t tokens = shape.n_tokens;
  std::vector<uint8_t> codes(shape.elems());  // [layer][token][channel]
  std::vector<LayerSide> side(shape.n_layers);
  std::vector<Status> statuses(shape.n_layers);
  ParallelForOrSerial(pool, shape.n_layers, [&](size_t l) {
    std::vector<float> x(shape.layer_elems());
    kv.ReadLayerF32(kind, static_cast<uint32_t>(l), x.data());
    if (!AllInFp16Range(x.data(), x.size())) {
      statuses[l] = InvalidArgument(
          FormatMessage("%s layer %zu holds NaN, inf or a value beyond fp16 range (|x| > 65504)", KvKindName(kind), l));
      return;
    }
    uint8_t* layer_codes = codes.data() + l * shape.layer_elems();
    LayerSide& ls = side[l];
    QuantiseLayer(x.data(), tokens, channels, p.group, p.bits(), &ls.scales, layer_codes);
    if (p.center) ls.centres = CentreChannels(layer_codes, tokens, channels, p.bits());
    ls.channel_order = p.order ? OrderChannels(layer_codes, tokens, channels) : Identity(channels);
    ls.token_order = p.token_order ? OrderTokens(layer_codes, tokens, channels) : Identity(tokens);
  });
  for (const Status& s : statuses) RETURN_IF_ERROR(s);

  const LayoutGeometry geometry(shape, p.layout);
  std::vector<std::vector<uint8_t>> pixels(geometry.streams().size());
  for (size_t s = 0; s < pixels.size(); ++s) pixels[s].assign(geometry.streams()[s].bytes(), 0);
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    const uint8_t* layer_codes = codes.data() + l * shape.layer_elems();
    const LayerSide& ls = side[l];
    const LayoutGeometry::LayerPlaces places = geometry.PlaceLayer(l);
    uint8_t* const layer_pixels = pixels[places.stream].data() + places.base;
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint8_t* row = layer_codes + size_t{ls.token_order[t]} * channels;
      uint8_t* const frame = layer_pixels + t * places.token_stride;
      for (uint32_t pos = 0; pos < channels; ++pos) frame[places.position_offsets[pos]] = row[ls.channel_order[pos]];
    }
  }
  std::vector<Result<std::vector<uint8_t>>> streams(pixels.size(), Internal("not encoded"));
  ParallelForOrSerial(pool, pixels.size(), [&](size_t s) {
    const auto& st = geometry.streams()[s];
    streams[s] = EncodeVideoStream(st.picture, st.n_frames, pixels[s], p.stream_options());
  });

  ByteWriter w;
  for (const LayerSide& ls : side) {
    for (const GroupScale& g : ls.scales) {
      w.U16(g.min_fp16);
      w.U16(g.scale_fp16);
    }
    w.Bytes(ls.centres);
    if (p.order) {
      for (uint32_t c : ls.channel_order) PutIndex(&w, c, IndexBytes(channels));
    }
    if (p.token_order) {
      for (uint32_t t : ls.token_order) PutIndex(&w, t, IndexBytes(tokens));
    }
  }
  for (size_t s = 0; s < streams.size(); ++s) {
    if (!streams[s].ok()) return streams[s].status().WithContext(FormatMessage("%s stream %zu", KvKindName(kind), s));
    if (streams[s]->size() > UINT32_MAX) return InvalidArgument("video stream exceeds 4 GiB");
    w.U32(static_cast<uint32_t>(streams[s]->size()));
    w.Bytes(*streams[s]);
  }
  section->bytes = w.Take();
  return Status::Ok();
}

Status ReadPermutation(ByteReader& r, uint32_t n, std::vector<uint32_t>* order) {
  order->resize(n);
  for (uint32_t& v : *order) RETURN_IF_ERROR(GetIndex(r, IndexBytes(n), &v));
  return Status::Ok();
}

Status ReadLayerSide(ByteReader& r, const Params& p, uint32_t channels, uint32_t tokens, const char* kname,
                     uint32_t layer, LayerSide* ls) {
  ls->scales.resize((channels + p.group - 1) / p.group);
  for (GroupScale& g : ls->scales) {
    RETURN_IF_ERROR(r.U16(&g.min_fp16, "group min"));
    RETURN_IF_ERROR(r.U16(&g.scale_fp16, "group scale"));
    // inf/NaN, or a negative scale (sign bit set, -0 included), is something no encoder writes.
    KVC_CHECK_CORRUPT(
        (g.min_fp16 & 0x7c00) != 0x7c00 && (g.scale_fp16 & 0xfc00) != 0x7c00 && (g.scale_fp16 & 0x8000) == 0,
        "%s layer %u: a group min or scale is inf, NaN or negative", kname, layer);
  }
  if (p.center) {
    std::span<const uint8_t> centres;
    RETURN_IF_ERROR(r.Bytes(channels, &centres, "channel centres"));
    const uint32_t max_code = (1u << p.bits()) - 1;
    uint32_t bad = 0;
    for (uint8_t c : centres) bad |= static_cast<uint32_t>(c > max_code);
    KVC_CHECK_CORRUPT(bad == 0, "%s layer %u: a channel centre exceeds %u", kname, layer, max_code);
    ls->centres.assign(centres.begin(), centres.end());
  }
  if (p.order) {
    RETURN_IF_ERROR(ReadPermutation(r, channels, &ls->channel_order));
    KVC_CHECK_CORRUPT(IsPermutation(ls->channel_order, channels), "%s layer %u: channel order is not a permutation",
                      kname, layer);
  } else {
    ls->channel_order = Identity(channels);
  }
  if (p.token_order) {
    RETURN_IF_ERROR(ReadPermutation(r, tokens, &ls->token_order));
    KVC_CHECK_CORRUPT(IsPermutation(ls->token_order, tokens), "%s layer %u: token order is not a permutation", kname,
                      layer);
  } else {
    ls->token_order = Identity(tokens);
  }
  return Status::Ok();
}

// One kind's section, parsed and checked but not decoded: everything in it is backed by the
// section's bytes, so parsing allocates at most a few times the file's size.
struct ParsedKind {
  std::vector<LayerSide> side;
  std::vector<std::span<const uint8_t>> streams;
};

Result<ParsedKind> ParseKind(std::span<const uint8_t> bytes, KvKind kind, const KvShape& shape, const Params& p,
                             const LayoutGeometry& geometry) {
  const char* kname = KvKindName(kind);
  const uint32_t channels = static_cast<uint32_t>(shape.row_elems());
  const uint32_t tokens = shape.n_tokens;
  // Side information and one length per stream: checked before anything is allocated.
  const uint64_t fixed = uint64_t{shape.n_layers} * SideBytes(p, channels, tokens) + 4 * geometry.streams().size();
  KVC_CHECK_CORRUPT(bytes.size() >= fixed, "section %s holds %zu bytes, fewer than the %llu its header needs", kname,
                    bytes.size(), static_cast<unsigned long long>(fixed));
  ByteReader r(bytes);
  ParsedKind parsed;
  parsed.side.resize(shape.n_layers);
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    RETURN_IF_ERROR(ReadLayerSide(r, p, channels, tokens, kname, l, &parsed.side[l]));
  }
  parsed.streams.resize(geometry.streams().size());
  for (auto& s : parsed.streams) {
    uint32_t len;
    RETURN_IF_ERROR(r.U32(&len, "video stream length"));
    RETURN_IF_ERROR(r.Bytes(len, &s, "video stream"));
  }
  KVC_CHECK_CORRUPT(r.empty(), "section %s: %zu bytes after the last stream", kname, r.remaining());
  // Every stream's header (picture, frame and packet counts) against the shape, before any
  // picture is allocated: a stream must back each of its frames with a packet.
  for (size_t s = 0; s < parsed.streams.size(); ++s) {
    const auto& st = geometry.streams()[s];
    if (auto v = ParseVideoStream(parsed.streams[s], st.picture, st.n_frames); !v.ok()) {
      return v.status().WithContext(FormatMessage("%s stream %zu", kname, s));
    }
  }
  return parsed;
}

Status DecodeKind(const ParsedKind& parsed, KvKind kind, const KvShape& shape, const Params& p,
                  const LayoutGeometry& geometry, const VideoDecoderBackend& backend, ThreadPool* pool,
                  const KvSlice& out) {
  const char* kname = KvKindName(kind);
  const uint32_t channels = static_cast<uint32_t>(shape.row_elems());
  const uint32_t tokens = shape.n_tokens;
  const auto& streams = parsed.streams;
  std::vector<std::vector<uint8_t>> pixels(streams.size());
  std::vector<Status> statuses(streams.size());
  // The pool's threads (its workers and the caller) shared among the streams decoded at once:
  // the token-axis layout has one stream per kind, which libavcodec's threads then split.
  const size_t pool_threads = pool != nullptr ? pool->size() + 1 : 1;
  const size_t per_stream = pool_threads / std::max<size_t>(1, streams.size());
  const VideoDecodeOptions options{.threads = static_cast<uint32_t>(std::max<size_t>(1, per_stream))};
  ParallelForOrSerial(pool, streams.size(), [&](size_t s) {
    const auto& st = geometry.streams()[s];
    pixels[s].resize(st.bytes());
    statuses[s] = backend.DecodeWithOptions(streams[s], st.picture, st.n_frames, pixels[s], options);
  });
  for (size_t s = 0; s < statuses.size(); ++s) {
    if (!statuses[s].ok()) return statuses[s].WithContext(FormatMessage("%s stream %zu", kname, s));
  }

  const uint32_t max_code = (1u << p.bits()) - 1;
  std::vector<uint8_t> codes(shape.layer_elems());
  std::vector<float> x(shape.layer_elems());
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    const LayerSide& ls = parsed.side[l];
    uint32_t bad = 0;
    const LayoutGeometry::LayerPlaces places = geometry.PlaceLayer(l);
    const uint8_t* const layer_pixels = pixels[places.stream].data() + places.base;
    for (uint32_t t = 0; t < tokens; ++t) {
      uint8_t* row = codes.data() + size_t{ls.token_order[t]} * channels;
      const uint8_t* const frame = layer_pixels + t * places.token_stride;
      for (uint32_t pos = 0; pos < channels; ++pos) {
        const uint8_t v = frame[places.position_offsets[pos]];
        bad |= static_cast<uint32_t>(v > max_code);
        row[ls.channel_order[pos]] = v;
      }
    }
    KVC_CHECK_CORRUPT(bad == 0, "%s layer %u: a decoded code exceeds %u (%u-bit level)", kname, l, max_code, p.bits());
    if (p.center) UncentreChannels(codes.data(), tokens, channels, p.bits(), ls.centres);
    DequantiseLayer(codes.data(), tokens, channels, p.group, ls.scales, x.data());
    out.WriteRowsF32(kind, l, 0, tokens, x.data());
  }
  return Status::Ok();
}

}  // namespace

const CodecInfo& VideoCodec::info() const {
  static const CodecInfo info{
      .name = "video",
      .id = kId,
      .version = 1,
      .levels = {"8", "6", "4"},
      .default_level = "8",
      .description =
          "KVCodec: per-channel quantisation, codec-friendly layout, lossless x265/x264/FFV1 "
          "through libavcodec",
      .params = {"coder=ffv1", "layout=axis", "order=1", "token_order=1", "planes=0", "center=0", "group=64",
                 "preset=medium", "slices=0", "ffv1_coder=auto", "ffv1_context=0", "nvdec=0"},
  };
  return info;
}

Result<EncodedKv> VideoCodec::Encode(const KvView& kv, const EncodeOptions& options,
                                     const CodecContext& context) const {
  ASSIGN_OR_RETURN(const Params p, ParseOptions(options));
  EncodedKv out;
  out.level = kLevelNames[p.level_id];
  out.params = WriteParams(p);
  // A keys-only cache (an MLA latent, an indexer's keys) has no V to read: its file is K's section alone.
  for (KvKind kind : kv.shape().kinds()) {
    RETURN_IF_ERROR(EncodeKind(kv, kind, p, context.pool, &out.sections.emplace_back()));
  }
  return out;
}

Status VideoCodec::DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  const KvShape& shape = h.shape;
  ASSIGN_OR_RETURN(const Params p, ParseParams(h.codec_params));
  KVC_CHECK_CORRUPT(h.level == kLevelNames[p.level_id], "level '%s' disagrees with params (%u bits)", h.level.c_str(),
                    p.bits());
  // Writing V into a keys-only destination would run past storage it does not have; DecodeKvcInto
  // matches the two, this keeps a direct caller from getting it wrong silently.
  if (out.shape() != shape) return InvalidArgument("the output's shape is not the header's");
  // Exactly the header's kinds, K alone for a keys-only file: a stray V section, or a K+V file
  // missing V, is kCorrupt here, and nothing below touches a kind the header does not list.
  ASSIGN_OR_RETURN(const auto sections, KvSections(file));
  if (shape.layer_elems() == 0) {
    for (KvKind kind : shape.kinds()) {
      KVC_CHECK_CORRUPT(SectionOf(sections, kind).empty(), "section %s holds %zu bytes for zero elements",
                        KvKindName(kind), SectionOf(sections, kind).size());
    }
    return Status::Ok();
  }
  // No encoder makes a picture beyond kMaxPictureSide (the token-axis layout is T wide and C
  // high), so a header implying one is damaged.
  const LayoutGeometry geometry(shape, p.layout);
  for (const auto& st : geometry.streams()) {
    KVC_CHECK_CORRUPT(st.picture.width <= kMaxPictureSide && st.picture.height <= kMaxPictureSide,
                      "the shape makes %ux%u pictures, beyond the %u-pixel limit of a video stream", st.picture.width,
                      st.picture.height, kMaxPictureSide);
  }
  // Every section is parsed and every stream header checked against the shape before the
  // output or any picture is allocated.
  std::array<ParsedKind, 2> parsed;
  for (KvKind kind : shape.kinds()) {
    ASSIGN_OR_RETURN(parsed[kind == KvKind::kKey ? 0 : 1],
                     ParseKind(SectionOf(sections, kind), kind, shape, p, geometry));
  }
  const VideoDecoderBackend& backend =
      context.video_decoder != nullptr ? *context.video_decoder : DefaultVideoDecoder();
  for (KvKind kind : shape.kinds()) {
    RETURN_IF_ERROR(
        DecodeKind(parsed[kind == KvKind::kKey ? 0 : 1], kind, shape, p, geometry, backend, context.pool, out));
  }
  return Status::Ok();
}

}  // namespace kvc
