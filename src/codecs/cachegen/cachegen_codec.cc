#include "codecs/cachegen/cachegen_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/byte_io.h"
#include "base/half.h"
#include "entropy/rans.h"

namespace kvc {
namespace {

// Sections 'K' then 'V' (KvSectionTag; 'K' alone for a keys-only cache), each L layer blocks;
// layout in docs/format.md.
constexpr uint8_t kVersion = 1;
constexpr size_t kParamsBytes = 18;
constexpr uint32_t kLevelCount = 3;
constexpr const char* kLevelNames[kLevelCount] = {"high", "medium", "low"};
constexpr uint32_t kDefaultLevelId = 1;
// Anchors are plain 8-bit asymmetric codes: their values span the channel's whole range.
constexpr uint32_t kAnchorLevels = 255;
constexpr uint32_t kAnchorAlphabet = 256;
constexpr uint8_t kModePacked = 0;
constexpr uint8_t kModeRans = 1;
constexpr uint8_t kModeRansShared = 2;
constexpr float kFp16Max = 65504.0f;
// Per channel: anchor min, anchor scale, delta step, all fp16.
constexpr size_t kStatBytes = 6;
// The smallest serialised frequency table: alphabet varint, scale_bits, one entry.
constexpr size_t kMinTableBytes = 3;
// A layer block is at least its length, the stats and the mode byte.
constexpr size_t kMinBlockOverhead = 4 + 1;

using Bands = CacheGenCodec::Bands;

struct Params {
  uint32_t group = CacheGenCodec::kDefaultGroup;
  uint32_t level_id = kDefaultLevelId;
  Bands k;
  Bands v;
  const Bands& BandsOf(KvKind kind) const { return kind == KvKind::kKey ? k : v; }
};

// The fraction of layers counted as shallow, rounded up and at least one layer: the widely
// used port's "K layers 0-9 of 32" and "V layers 0-1 of 32", scaled to the model's depth.
uint32_t ShallowLayers(uint32_t n_layers, uint32_t per_32) {
  const uint32_t n = static_cast<uint32_t>((uint64_t{n_layers} * per_32 + 31) / 32);
  return std::min(n_layers, std::max(n, 1u));
}

// "medium" is the port's 32 / 16 bins; "high" doubles and "low" halves them.
Bands MakeBands(uint32_t level_id, uint32_t n_layers, uint32_t per_32) {
  return Bands{
      .shallow_bins = 64u >> level_id, .deep_bins = 32u >> level_id, .shallow_layers = ShallowLayers(n_layers, per_32)};
}

// Delta codes are symmetric around 0: bins - 1 symbols, symbol s meaning (s - half) steps.
uint32_t HalfOf(uint32_t bins) { return (bins - 2) / 2; }
uint32_t AlphabetOf(uint32_t bins) { return bins - 1; }
uint32_t PackedWidth(uint32_t alphabet) { return static_cast<uint32_t>(std::bit_width(alphabet - 1)); }

// A table's precision follows how many symbols it codes: a small chunk cannot use fine
// probabilities, and coarse ones keep its stored tables short. Fixed by the symbol count so
// the decoder can insist on it, which bounds the lookup memory a hostile file can demand.
uint32_t ScaleBitsFor(uint64_t n_symbols) {
  const uint32_t bits = static_cast<uint32_t>(std::bit_width(n_symbols));
  return std::clamp(bits, FrequencyTable::kMinScaleBits, FrequencyTable::kMaxScaleBits);
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

std::vector<uint8_t> WriteParams(const Params& p) {
  ByteWriter w;
  w.U8(kVersion);
  w.U32(p.group);
  w.U8(static_cast<uint8_t>(p.level_id));
  for (const Bands* b : {&p.k, &p.v}) {
    w.U8(static_cast<uint8_t>(b->shallow_bins));
    w.U8(static_cast<uint8_t>(b->deep_bins));
    w.U32(b->shallow_layers);
  }
  return w.Take();
}

Result<Params> ParseParams(std::span<const uint8_t> bytes, uint32_t n_layers) {
  KVC_CHECK_CORRUPT(bytes.size() == kParamsBytes, "params hold %zu bytes, expected %zu", bytes.size(), kParamsBytes);
  ByteReader r(bytes);
  uint8_t version;
  uint8_t level_id;
  Params p;
  RETURN_IF_ERROR(r.U8(&version, "params.version"));
  RETURN_IF_ERROR(r.U32(&p.group, "params.group"));
  RETURN_IF_ERROR(r.U8(&level_id, "params.level"));
  KVC_CHECK_CORRUPT(version == kVersion, "params: version %u, expected %u", version, kVersion);
  KVC_CHECK_CORRUPT(p.group >= 1 && p.group <= CacheGenCodec::kMaxGroup, "params: group %u outside 1..%u", p.group,
                    CacheGenCodec::kMaxGroup);
  KVC_CHECK_CORRUPT(level_id < kLevelCount, "params: level id %u unknown", level_id);
  p.level_id = level_id;
  // Both kinds' bands, keys-only cache or not: the params blob has one layout, and V's bands are
  // what the level implies whether or not a V section follows.
  for (KvKind kind : kKvKinds) {
    uint8_t shallow;
    uint8_t deep;
    Bands b;
    RETURN_IF_ERROR(r.U8(&shallow, "params.shallow_bins"));
    RETURN_IF_ERROR(r.U8(&deep, "params.deep_bins"));
    RETURN_IF_ERROR(r.U32(&b.shallow_layers, "params.shallow_layers"));
    b.shallow_bins = shallow;
    b.deep_bins = deep;
    // The bins are recorded for readers of the file; a decoder trusts only what the level
    // implies, so a file whose bins disagree with its level is damaged.
    const Bands expected = kind == KvKind::kKey ? CacheGenCodec::KeyBands(level_id, n_layers)
                                                : CacheGenCodec::ValueBands(level_id, n_layers);
    KVC_CHECK_CORRUPT(b == expected, "params: %s bins %u/%u below/above layer %u disagree with level '%s'",
                      KvKindName(kind), b.shallow_bins, b.deep_bins, b.shallow_layers, kLevelNames[level_id]);
    (kind == KvKind::kKey ? p.k : p.v) = b;
  }
  return p;
}

Result<Params> ParseOptions(const EncodeOptions& options, uint32_t n_layers) {
  static constexpr std::string_view kKnown[] = {"group"};
  RETURN_IF_ERROR(CheckKnownParams(options, kKnown));
  Params p;
  if (!options.level.empty()) {
    const auto* it = std::find(std::begin(kLevelNames), std::end(kLevelNames), options.level);
    if (it == std::end(kLevelNames)) {
      return InvalidArgument("unknown level '" + options.level + "' (cachegen levels: high, medium, low)");
    }
    p.level_id = static_cast<uint32_t>(it - std::begin(kLevelNames));
  }
  ASSIGN_OR_RETURN(p.group, ParamU32(options, "group", CacheGenCodec::kDefaultGroup, 1, CacheGenCodec::kMaxGroup));
  p.k = CacheGenCodec::KeyBands(p.level_id, n_layers);
  p.v = CacheGenCodec::ValueBands(p.level_id, n_layers);
  return p;
}

// Shared by encoder and decoder so that deltas are taken against exactly the anchor the
// decoder rebuilds: quantisation errors then do not add up along a group.
inline float AnchorValue(uint32_t code, float min, float scale) { return min + static_cast<float>(code) * scale; }
inline float DeltaValue(float anchor, uint32_t symbol, uint32_t half, float step) {
  return anchor + (static_cast<float>(symbol) - static_cast<float>(half)) * step;
}
inline float ClampFp16(float x) { return std::clamp(x, -kFp16Max, kFp16Max); }

void PutU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Codes of one (kind, layer): anchors [group][channel], deltas [non-anchor token][channel].
struct LayerCodes {
  std::vector<uint8_t> stats;  // C x {anchor min, anchor scale, delta step}, fp16 LE
  std::vector<uint8_t> anchors;
  std::vector<uint16_t> deltas;
};

void QuantiseLayer(const float* x, uint32_t tokens, size_t channels, uint32_t group, uint32_t bins, LayerCodes* out) {
  const size_t n_groups = CeilDiv(tokens, group);
  const uint32_t half = HalfOf(bins);
  std::vector<float> lo(x, x + channels);
  std::vector<float> hi(x, x + channels);
  for (size_t g = 1; g < n_groups; ++g) {
    const float* row = x + g * group * channels;
    for (size_t c = 0; c < channels; ++c) {
      lo[c] = std::min(lo[c], row[c]);
      hi[c] = std::max(hi[c], row[c]);
    }
  }
  std::vector<float> range(channels, 0.0f);
  {
    std::vector<float> all_lo(x, x + channels);
    std::vector<float> all_hi(x, x + channels);
    for (uint32_t t = 1; t < tokens; ++t) {
      const float* row = x + size_t{t} * channels;
      for (size_t c = 0; c < channels; ++c) {
        all_lo[c] = std::min(all_lo[c], row[c]);
        all_hi[c] = std::max(all_hi[c], row[c]);
      }
    }
    for (size_t c = 0; c < channels; ++c) range[c] = all_hi[c] - all_lo[c];
  }
  out->stats.assign(channels * kStatBytes, 0);
  std::vector<float> amin(channels);
  std::vector<float> ascale(channels);
  std::vector<float> ainv(channels);
  for (size_t c = 0; c < channels; ++c) {
    // + 0.0f: which zero a min reduction returns must not reach the bytes.
    const uint16_t min_h = Fp32ToFp16Down(lo[c] + 0.0f);
    amin[c] = Fp16ToFp32(min_h);
    // + 0.0f again: a channel whose anchors are all -0 has hi - amin = -0, and a scale with its
    // sign bit set is what the decoder rejects (the file would be unreadable).
    const uint16_t scale_h = Fp32ToFp16Up((hi[c] - amin[c]) / static_cast<float>(kAnchorLevels) + 0.0f);
    ascale[c] = Fp16ToFp32(scale_h);
    ainv[c] = ascale[c] > 0.0f ? 1.0f / ascale[c] : 0.0f;
    PutU16(&out->stats[c * kStatBytes], min_h);
    PutU16(&out->stats[c * kStatBytes + 2], scale_h);
  }
  out->anchors.resize(n_groups * channels);
  std::vector<float> ahat(n_groups * channels);
  for (size_t g = 0; g < n_groups; ++g) {
    const float* row = x + g * group * channels;
    for (size_t c = 0; c < channels; ++c) {
      const float v = std::min((row[c] - amin[c]) * ainv[c], static_cast<float>(kAnchorLevels));
      const uint32_t code = static_cast<uint32_t>(std::nearbyint(v));
      out->anchors[g * channels + c] = static_cast<uint8_t>(code);
      ahat[g * channels + c] = AnchorValue(code, amin[c], ascale[c]);
    }
  }
  // The step is relative to the channel's value range in the chunk, as the port's bins span the
  // value range: deltas of tokens that resemble their anchor then fall in the few central bins,
  // which is what the entropy coder turns into bits saved. A step scaled to max|delta| would
  // spread every channel's deltas over all bins whatever the correlation. The max with max|delta|
  // (which exceeds the range only by the anchor's rounding) keeps every code within +-half.
  std::vector<float> maxabs(channels, 0.0f);
  for (uint32_t t = 0; t < tokens; ++t) {
    if (t % group == 0) continue;
    const float* row = x + size_t{t} * channels;
    const float* a = ahat.data() + size_t{t / group} * channels;
    for (size_t c = 0; c < channels; ++c) maxabs[c] = std::max(maxabs[c], std::fabs(row[c] - a[c]));
  }
  std::vector<float> step(channels);
  std::vector<float> sinv(channels);
  for (size_t c = 0; c < channels; ++c) {
    const uint16_t step_h = Fp32ToFp16Up(std::max(range[c], maxabs[c]) / static_cast<float>(half));
    step[c] = Fp16ToFp32(step_h);
    sinv[c] = step[c] > 0.0f ? 1.0f / step[c] : 0.0f;
    PutU16(&out->stats[c * kStatBytes + 4], step_h);
  }
  out->deltas.clear();
  out->deltas.reserve((tokens - n_groups) * channels);
  const float fhalf = static_cast<float>(half);
  for (uint32_t t = 0; t < tokens; ++t) {
    if (t % group == 0) continue;
    const float* row = x + size_t{t} * channels;
    const float* a = ahat.data() + size_t{t / group} * channels;
    for (size_t c = 0; c < channels; ++c) {
      const float q = std::clamp(std::nearbyint((row[c] - a[c]) * sinv[c]), -fhalf, fhalf);
      out->deltas.push_back(static_cast<uint16_t>(q + fhalf));
    }
  }
}

// Codes counts[0 .. last non-zero]: trailing never-used symbols need no table entries.
Result<FrequencyTable> TableFromCounts(const std::vector<uint64_t>& counts, uint64_t n_symbols) {
  size_t n = counts.size();
  while (n > 1 && counts[n - 1] == 0) --n;
  return FrequencyTable::FromCounts(std::span(counts.data(), n), ScaleBitsFor(n_symbols));
}

// per_channel: one delta table per channel (the method); otherwise one for the whole layer,
// which wins on chunks too short to pay for a table per channel.
Result<std::vector<uint8_t>> RansPayload(const LayerCodes& codes, size_t channels, uint32_t alphabet,
                                         bool per_channel) {
  const size_t n_deltas = channels == 0 ? 0 : codes.deltas.size() / channels;
  ByteWriter w;
  std::vector<uint64_t> counts(kAnchorAlphabet, 0);
  for (uint8_t a : codes.anchors) ++counts[a];
  ASSIGN_OR_RETURN(FrequencyTable anchor_table, TableFromCounts(counts, codes.anchors.size()));
  anchor_table.AppendTo(&w);
  std::vector<FrequencyTable> tables;
  if (n_deltas > 0) {
    const size_t n_tables = per_channel ? channels : 1;
    std::vector<uint64_t> table_counts(n_tables * alphabet, 0);
    for (size_t i = 0; i < codes.deltas.size(); ++i) {
      ++table_counts[(per_channel ? i % channels : 0) * alphabet + codes.deltas[i]];
    }
    tables.reserve(n_tables);
    for (size_t c = 0; c < n_tables; ++c) {
      std::vector<uint64_t> cc(table_counts.begin() + c * alphabet, table_counts.begin() + (c + 1) * alphabet);
      ASSIGN_OR_RETURN(FrequencyTable t, TableFromCounts(cc, per_channel ? n_deltas : codes.deltas.size()));
      t.AppendTo(&w);
      tables.push_back(std::move(t));
    }
  }
  RansEncoder enc;
  enc.Reserve(codes.anchors.size() + codes.deltas.size());
  for (uint8_t a : codes.anchors) enc.Put(anchor_table, a);
  for (size_t i = 0; i < codes.deltas.size(); ++i) enc.Put(tables[per_channel ? i % channels : 0], codes.deltas[i]);
  ASSIGN_OR_RETURN(std::vector<uint8_t> stream, enc.Finish());
  if (stream.size() > UINT32_MAX) return InvalidArgument("layer stream exceeds 4 GiB");
  w.U32(static_cast<uint32_t>(stream.size()));
  w.Bytes(stream);
  return w.Take();
}

uint64_t PackedDeltaBytes(uint64_t n_codes, uint32_t width) { return CeilDiv(n_codes * width, 8); }

void AppendPacked(const LayerCodes& codes, uint32_t width, ByteWriter* w) {
  w->Bytes(codes.anchors);
  uint64_t acc = 0;
  uint32_t n_bits = 0;
  for (uint16_t d : codes.deltas) {
    acc |= uint64_t{d} << n_bits;
    n_bits += width;
    while (n_bits >= 8) {
      w->U8(static_cast<uint8_t>(acc));
      acc >>= 8;
      n_bits -= 8;
    }
  }
  if (n_bits > 0) w->U8(static_cast<uint8_t>(acc));
}

// Reads `width`-bit codes LSB first; the caller has checked the span holds them all.
class BitReader {
 public:
  explicit BitReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint32_t Get(uint32_t width) {
    while (n_bits_ < width) {
      acc_ |= uint64_t{bytes_[pos_++]} << n_bits_;
      n_bits_ += 8;
    }
    const uint32_t v = static_cast<uint32_t>(acc_ & ((1u << width) - 1));
    acc_ >>= width;
    n_bits_ -= width;
    return v;
  }
  // Bits left over in the last byte; the encoder writes them as 0.
  uint64_t leftover() const { return acc_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  uint32_t n_bits_ = 0;
};

Status EncodeKind(const KvView& kv, KvKind kind, const Params& p, KvcSection* section) {
  const KvShape shape = kv.shape();
  section->tag = KvSectionTag(kind);
  if (shape.layer_elems() == 0) return Status::Ok();
  const size_t channels = shape.row_elems();
  std::vector<float> x(shape.layer_elems());
  LayerCodes codes;
  ByteWriter w;
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    kv.ReadLayerF32(kind, l, x.data());
    if (!AllInFp16Range(x.data(), x.size())) {
      return InvalidArgument(
          FormatMessage("%s layer %u holds NaN, inf or a value beyond fp16 range (|x| > 65504)", KvKindName(kind), l));
    }
    const uint32_t bins = p.BandsOf(kind).BinsOf(l);
    QuantiseLayer(x.data(), shape.n_tokens, channels, p.group, bins, &codes);
    const uint32_t alphabet = AlphabetOf(bins);
    ASSIGN_OR_RETURN(const std::vector<uint8_t> rans, RansPayload(codes, channels, alphabet, true));
    ASSIGN_OR_RETURN(const std::vector<uint8_t> shared, RansPayload(codes, channels, alphabet, false));
    const uint64_t packed = codes.anchors.size() + PackedDeltaBytes(codes.deltas.size(), PackedWidth(alphabet));
    // Smallest wins; ties go to the simpler mode, so the choice is a function of the sizes alone.
    uint8_t mode = kModePacked;
    uint64_t payload = packed;
    if (shared.size() < payload) {
      mode = kModeRansShared;
      payload = shared.size();
    }
    if (rans.size() <= payload) {
      mode = kModeRans;
      payload = rans.size();
    }
    const uint64_t block = codes.stats.size() + 1 + payload;
    if (block > UINT32_MAX)
      return InvalidArgument(FormatMessage("%s layer %u block exceeds 4 GiB", KvKindName(kind), l));
    w.U32(static_cast<uint32_t>(block));
    w.Bytes(codes.stats);
    w.U8(mode);
    if (mode == kModeRans) {
      w.Bytes(rans);
    } else if (mode == kModeRansShared) {
      w.Bytes(shared);
    } else {
      AppendPacked(codes, PackedWidth(alphabet), &w);
    }
  }
  section->bytes = w.Take();
  return Status::Ok();
}

// Reads the stats of one layer block. An inf/NaN value, or a negative scale or step (sign bit
// set, -0 included), is something no encoder writes.
bool ReadStats(std::span<const uint8_t> bytes, size_t channels, float* amin, float* ascale, float* step) {
  uint32_t bad = 0;
  for (size_t c = 0; c < channels; ++c) {
    const uint8_t* p = bytes.data() + c * kStatBytes;
    const uint16_t h[3] = {static_cast<uint16_t>(p[0] | (p[1] << 8)), static_cast<uint16_t>(p[2] | (p[3] << 8)),
                           static_cast<uint16_t>(p[4] | (p[5] << 8))};
    for (uint16_t v : h) bad |= static_cast<uint32_t>((v & 0x7c00) == 0x7c00);
    bad |= static_cast<uint32_t>((h[1] & 0x8000) != 0) | static_cast<uint32_t>((h[2] & 0x8000) != 0);
    amin[c] = Fp16ToFp32(h[0]);
    ascale[c] = Fp16ToFp32(h[1]);
    step[c] = Fp16ToFp32(h[2]);
  }
  return bad == 0;
}

Status DecodeLayer(ByteReader& r, KvKind kind, uint32_t layer, uint32_t tokens, size_t channels, uint32_t group,
                   uint32_t bins, float* x) {
  const char* kname = KvKindName(kind);
  uint32_t block_len;
  std::span<const uint8_t> block;
  RETURN_IF_ERROR(r.U32(&block_len, "layer block length"));
  RETURN_IF_ERROR(r.Bytes(block_len, &block, "layer block"));
  ByteReader br(block);
  std::span<const uint8_t> stats;
  RETURN_IF_ERROR(br.Bytes(channels * kStatBytes, &stats, "layer stats"));
  std::vector<float> amin(channels);
  std::vector<float> ascale(channels);
  std::vector<float> step(channels);
  KVC_CHECK_CORRUPT(ReadStats(stats, channels, amin.data(), ascale.data(), step.data()),
                    "%s layer %u: an anchor min/scale or delta step is inf, NaN or negative", kname, layer);
  uint8_t mode;
  RETURN_IF_ERROR(br.U8(&mode, "layer mode"));
  KVC_CHECK_CORRUPT(mode == kModePacked || mode == kModeRans || mode == kModeRansShared, "%s layer %u: mode %u unknown",
                    kname, layer, mode);

  const size_t n_groups = CeilDiv(tokens, group);
  const size_t n_deltas = tokens - n_groups;
  const uint32_t half = HalfOf(bins);
  const uint32_t alphabet = AlphabetOf(bins);
  // Anchors are rebuilt into their token's row first; deltas then read them from there.
  auto anchor_row = [&](size_t g) { return x + g * group * channels; };
  auto emit_delta = [&](uint32_t t, size_t c, uint32_t symbol) {
    x[size_t{t} * channels + c] = DeltaValue(anchor_row(t / group)[c], symbol, half, step[c]);
  };

  if (mode == kModePacked) {
    const uint32_t width = PackedWidth(alphabet);
    std::span<const uint8_t> anchors;
    std::span<const uint8_t> deltas;
    RETURN_IF_ERROR(br.Bytes(n_groups * channels, &anchors, "packed anchors"));
    RETURN_IF_ERROR(br.Bytes(PackedDeltaBytes(uint64_t{n_deltas} * channels, width), &deltas, "packed deltas"));
    for (size_t g = 0; g < n_groups; ++g) {
      for (size_t c = 0; c < channels; ++c)
        anchor_row(g)[c] = AnchorValue(anchors[g * channels + c], amin[c], ascale[c]);
    }
    BitReader bits(deltas);
    uint32_t bad = 0;
    for (uint32_t t = 0; t < tokens; ++t) {
      if (t % group == 0) continue;
      for (size_t c = 0; c < channels; ++c) {
        uint32_t s = bits.Get(width);
        bad |= static_cast<uint32_t>(s >= alphabet);
        emit_delta(t, c, std::min(s, alphabet - 1));
      }
    }
    KVC_CHECK_CORRUPT(bad == 0, "%s layer %u: a packed delta code is outside 0..%u", kname, layer, alphabet - 1);
    KVC_CHECK_CORRUPT(bits.leftover() == 0, "%s layer %u: non-zero padding bits", kname, layer);
  } else {
    ASSIGN_OR_RETURN(const FrequencyTable anchor_table, FrequencyTable::Parse(&br, kAnchorAlphabet));
    const uint64_t n_anchor_codes = uint64_t{n_groups} * channels;
    KVC_CHECK_CORRUPT(anchor_table.scale_bits() == ScaleBitsFor(n_anchor_codes),
                      "%s layer %u: anchor table scale_bits %u, expected %u", kname, layer, anchor_table.scale_bits(),
                      ScaleBitsFor(n_anchor_codes));
    const bool per_channel = mode == kModeRans;
    const size_t n_tables = n_deltas == 0 ? 0 : per_channel ? channels : 1;
    const uint64_t per_table = per_channel ? n_deltas : uint64_t{n_deltas} * channels;
    std::vector<FrequencyTable> tables;
    // Checked before reserving: a forged channel count cannot demand memory the bytes do not back.
    KVC_CHECK_CORRUPT(br.remaining() / kMinTableBytes >= n_tables, "%s layer %u: %zu bytes cannot hold %zu tables",
                      kname, layer, br.remaining(), n_tables);
    tables.reserve(n_tables);
    for (size_t c = 0; c < n_tables; ++c) {
      ASSIGN_OR_RETURN(FrequencyTable t, FrequencyTable::Parse(&br, alphabet));
      KVC_CHECK_CORRUPT(t.scale_bits() == ScaleBitsFor(per_table), "%s layer %u table %zu: scale_bits %u, expected %u",
                        kname, layer, c, t.scale_bits(), ScaleBitsFor(per_table));
      tables.push_back(std::move(t));
    }
    uint32_t stream_len;
    std::span<const uint8_t> stream;
    RETURN_IF_ERROR(br.U32(&stream_len, "rANS stream length"));
    RETURN_IF_ERROR(br.Bytes(stream_len, &stream, "rANS stream"));
    ASSIGN_OR_RETURN(RansDecoder dec, RansDecoder::Open(stream));
    for (size_t g = 0; g < n_groups; ++g) {
      for (size_t c = 0; c < channels; ++c) anchor_row(g)[c] = AnchorValue(dec.Get(anchor_table), amin[c], ascale[c]);
    }
    for (uint32_t t = 0; t < tokens; ++t) {
      if (t % group == 0) continue;
      for (size_t c = 0; c < channels; ++c) emit_delta(t, c, dec.Get(tables[per_channel ? c : 0]));
    }
    if (Status s = dec.Finish(); !s.ok()) return s.WithContext(FormatMessage("%s layer %u", kname, layer));
  }
  KVC_CHECK_CORRUPT(br.empty(), "%s layer %u: %zu bytes after the codes", kname, layer, br.remaining());
  // Clamped only now: deltas are relative to the unclamped anchor, as the encoder computed them.
  for (size_t i = 0; i < size_t{tokens} * channels; ++i) x[i] = ClampFp16(x[i]);
  return Status::Ok();
}

// Walks one section's layer blocks without decoding them, so that both sections are known to
// be framed as the shape implies before the output is allocated: each block within its
// section, at least its stats and mode; a packed payload exactly the size the shape gives (it
// grows with the token count, so a forged count fails here); a rANS payload at least its
// tables' minimum, a stream length and a stream header (a rANS stream can code a run of one
// symbol in no bytes, so for those blocks DecodeKvc's expansion bound is what limits T).
Status CheckFraming(std::span<const uint8_t> section, KvKind kind, const KvShape& shape, const Params& p) {
  const char* kname = KvKindName(kind);
  const uint64_t channels = shape.row_elems();
  const uint64_t n_groups = CeilDiv(shape.n_tokens, p.group);
  const uint64_t n_deltas = shape.n_tokens - n_groups;
  const uint64_t stats = channels * kStatBytes;
  ByteReader r(section);
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    uint32_t block_len;
    std::span<const uint8_t> block;
    RETURN_IF_ERROR(r.U32(&block_len, "layer block length"));
    RETURN_IF_ERROR(r.Bytes(block_len, &block, "layer block"));
    KVC_CHECK_CORRUPT(block.size() > stats, "%s layer %u: a %zu-byte block cannot hold %llu bytes of stats and a mode",
                      kname, l, block.size(), static_cast<unsigned long long>(stats));
    const uint8_t mode = block[stats];
    const uint64_t payload = block.size() - stats - 1;
    const uint32_t alphabet = AlphabetOf(p.BandsOf(kind).BinsOf(l));
    if (mode == kModePacked) {
      const uint64_t expected = n_groups * channels + PackedDeltaBytes(n_deltas * channels, PackedWidth(alphabet));
      KVC_CHECK_CORRUPT(payload == expected, "%s layer %u: packed payload of %llu bytes, the shape implies %llu", kname,
                        l, static_cast<unsigned long long>(payload), static_cast<unsigned long long>(expected));
    } else if (mode == kModeRans || mode == kModeRansShared) {
      const uint64_t n_tables = 1 + (n_deltas == 0 ? 0 : mode == kModeRans ? channels : 1);
      const uint64_t least = n_tables * kMinTableBytes + 4 + kRansStreamHeaderBytes;
      KVC_CHECK_CORRUPT(payload >= least, "%s layer %u: a %llu-byte rANS payload cannot hold %llu tables and a stream",
                        kname, l, static_cast<unsigned long long>(payload), static_cast<unsigned long long>(n_tables));
    } else {
      return Corrupt(FormatMessage("%s layer %u: mode %u unknown", kname, l, mode));
    }
  }
  KVC_CHECK_CORRUPT(r.empty(), "section %s: %zu bytes after the last layer", kname, r.remaining());
  return Status::Ok();
}

}  // namespace

Bands CacheGenCodec::KeyBands(uint32_t level_id, uint32_t n_layers) { return MakeBands(level_id, n_layers, 10); }
Bands CacheGenCodec::ValueBands(uint32_t level_id, uint32_t n_layers) { return MakeBands(level_id, n_layers, 2); }

const CodecInfo& CacheGenCodec::info() const {
  static const CodecInfo info{
      .name = "cachegen",
      .id = kId,
      .version = 1,
      .levels = {"high", "medium", "low"},
      .default_level = "medium",
      .description =
          "CacheGen: anchor + delta per token group, fewer bins in deeper layers, "
          "rANS with per-(layer, channel) tables",
      .params = {"group=10"},
  };
  return info;
}

Result<EncodedKv> CacheGenCodec::Encode(const KvView& kv, const EncodeOptions& options, const CodecContext&) const {
  const KvShape shape = kv.shape();
  ASSIGN_OR_RETURN(const Params p, ParseOptions(options, shape.n_layers));
  EncodedKv out;
  out.level = kLevelNames[p.level_id];
  out.params = WriteParams(p);
  for (KvKind kind : shape.kinds()) RETURN_IF_ERROR(EncodeKind(kv, kind, p, &out.sections.emplace_back()));
  return out;
}

Status CacheGenCodec::DecodeInto(const KvcFile& file, const CodecContext&, const KvSlice& out) const {
  const KvcHeader& h = file.header;
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return Corrupt("shape: " + s.message());
  const KvShape& shape = h.shape;
  ASSIGN_OR_RETURN(const Params p, ParseParams(h.codec_params, shape.n_layers));
  KVC_CHECK_CORRUPT(h.level == kLevelNames[p.level_id], "level '%s' disagrees with params level '%s'", h.level.c_str(),
                    kLevelNames[p.level_id]);
  ASSIGN_OR_RETURN(const auto sections, KvSections(file));
  const size_t channels = shape.row_elems();
  // Only the kinds the header claims: KvSections has checked there are exactly those sections.
  for (KvKind kind : shape.kinds()) {
    const std::span<const uint8_t> s = SectionOf(sections, kind);
    if (shape.layer_elems() == 0) {
      KVC_CHECK_CORRUPT(s.empty(), "section %s holds %zu bytes for zero elements", KvKindName(kind), s.size());
    } else {
      // Every layer block carries at least its stats: checked before the cache is allocated.
      const uint64_t min_bytes = uint64_t{shape.n_layers} * (channels * kStatBytes + kMinBlockOverhead);
      KVC_CHECK_CORRUPT(s.size() >= min_bytes, "section %s holds %zu bytes, fewer than the %llu its layers need",
                        KvKindName(kind), s.size(), static_cast<unsigned long long>(min_bytes));
      RETURN_IF_ERROR(CheckFraming(s, kind, shape, p));
    }
  }

  if (shape.layer_elems() == 0) return Status::Ok();
  std::vector<float> x(shape.layer_elems());
  for (KvKind kind : shape.kinds()) {
    ByteReader r(SectionOf(sections, kind));
    for (uint32_t l = 0; l < shape.n_layers; ++l) {
      RETURN_IF_ERROR(DecodeLayer(r, kind, l, shape.n_tokens, channels, p.group, p.BandsOf(kind).BinsOf(l), x.data()));
      out.WriteRowsF32(kind, l, 0, shape.n_tokens, x.data());
    }
    KVC_CHECK_CORRUPT(r.empty(), "section %s: %zu bytes after the last layer", KvKindName(kind), r.remaining());
  }
  return Status::Ok();
}

}  // namespace kvc
