// One interface for every KV codec, and the registry that finds them by name or id.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/container.h"
#include "tensor/kv_cache.h"

namespace kvc {

struct CodecInfo {
  std::string name;                 // "raw", "quant", ...
  uint16_t id = 0;                  // stored in .kvc headers; never reused
  uint16_t version = 1;             // bumped when the codec's bytes change meaning
  std::vector<std::string> levels;  // quality levels, best quality first
  std::string default_level;
  std::string description;
  std::vector<std::string> params;  // names of accepted key=value parameters, with their defaults
  bool needs_calibration = false;   // encodes and decodes only with a calibration in the CodecContext
  // Stores NaN, infinities and values past the fp16 range as they are (raw). The others quantise by
  // ranges and scales that such a value would overflow, so EncodeKvc refuses it (CheckFinite).
  bool keeps_non_finite = false;
  // Decodes bit for bit what it was given (raw: an fp16 cache, the type it stores; planes: any
  // dtype), so there is no loss to measure on any model: a model without a quality profile may
  // use it, and the level planner ranks it with raw (loss 0).
  bool lossless = false;
};

// Level plus codec-specific parameters (e.g. group_size=128).
struct EncodeOptions {
  std::string level;  // empty: the codec's default level
  std::map<std::string, std::string> params;
};

// What a codec produces: its parameters (stored in the header) and payload sections.
struct EncodedKv {
  std::string level;
  std::vector<uint8_t> params;
  std::vector<KvcSection> sections;
};

class CalibrationRegistry;
class ThreadPool;
class VideoDecoderBackend;

// What a codec may use beyond its input: calibrations (kvtc finds its basis here, by model when
// encoding and by hash when decoding) and a thread pool. Not owned; any may be null.
struct CodecContext {
  CalibrationRegistry* calibrations = nullptr;
  const ModelFingerprint* model = nullptr;  // the model the KV belongs to, when known
  ThreadPool* pool = nullptr;
  const VideoDecoderBackend* video_decoder = nullptr;  // for the video codec; null: DefaultVideoDecoder()
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual const CodecInfo& info() const = 0;

  // Deterministic: the same view and options give the same bytes.
  virtual Result<EncodedKv> Encode(const KvView& kv, const EncodeOptions& options,
                                   const CodecContext& context) const = 0;

  // Rebuilds the tokens a .kvc file covers into `out`, whose shape, dtype and position are the
  // header's (DecodeKvcInto checks that first). `out` may be a slice of a longer cache holding
  // anything: every value of it is written, so nothing depends on what was there. `file` is
  // hostile: every size is checked. After a failure `out` holds an unspecified mix.
  virtual Status DecodeInto(const KvcFile& file, const CodecContext& context, const KvSlice& out) const = 0;

  // DecodeInto a new cache of the header's shape, dtype and position.
  Result<KvCache> Decode(const KvcFile& file, const CodecContext& context) const;
};

const Codec* FindCodec(std::string_view name);
const Codec* FindCodecById(uint16_t id);
std::vector<const Codec*> AllCodecs();

// What lossy codecs take: finite values within the fp16 range, as every fp16 KV cache holds (a
// larger one would overflow their ranges and scales). kInvalidArgument naming the first value
// outside it (which K or V, layer, token).
inline constexpr float kMaxEncodableMagnitude = 65504.0f;
Status CheckFinite(const KvView& kv);

// Encodes a view into a complete .kvc file. Input CheckFinite refuses is refused unless the codec
// keeps it (CodecInfo::keeps_non_finite): a lossy codec would write a file it cannot read.
Result<std::vector<uint8_t>> EncodeKvc(const Codec& codec, const KvView& kv, const EncodeOptions& options,
                                       const ModelFingerprint& fingerprint, uint32_t token_begin,
                                       const CodecContext& context = {});

// A decoded file may be at most this many times larger than the file (K and V, in the header's
// dtype), or kDecodeExpansionFloorBytes, whichever is more. Real KV compresses by well under
// 200x at any level (kvtc's highest target is 64x of fp16, 128x of an f32 restore); a rANS
// stream or a lossless video can code a constant run in next to no bytes, so this is what
// stops a small file from claiming a huge cache where a codec's own sizes cannot.
inline constexpr uint64_t kDefaultMaxDecodeExpansion = 1024;
inline constexpr uint64_t kDecodeExpansionFloorBytes = uint64_t{64} << 20;

// What the caller knows about a file before decoding it. Every set field must equal the
// header's, and the output must fit the limits; all of it is checked right after the header
// is read, before the codec runs or anything is allocated for the output.
struct DecodeExpect {
  std::optional<uint32_t> n_layers;
  std::optional<uint32_t> n_kv_heads;
  std::optional<uint32_t> head_dim;
  std::optional<uint32_t> n_tokens;
  std::optional<bool> keys_only;
  std::optional<int32_t> pos_begin;
  // Bytes of the decoded K and V together, in the header's dtype.
  uint64_t max_output_bytes = kMaxKvBytes;
  // See kDefaultMaxDecodeExpansion; 0: no bound beyond max_output_bytes.
  uint64_t max_expansion = kDefaultMaxDecodeExpansion;

  // Sets all four dimensions (n_tokens included) and keys_only from `shape`.
  DecodeExpect& Shape(const KvShape& shape);
};

// kInvalidArgument when the header disagrees with a set field of `expect` or its output exceeds
// max_output_bytes; kCorrupt when the output exceeds the expansion bound for `file_bytes`.
Status CheckDecodeExpect(const KvcHeader& header, size_t file_bytes, const DecodeExpect& expect);

// Parses, verifies and decodes a .kvc file with the codec its header names. When
// `expected_fingerprint` is given, a file made for another model is an error; `expect` is
// checked (CheckDecodeExpect) before the codec runs. Running out of memory while decoding is
// kInternal, not an exception.
Result<KvCache> DecodeKvc(std::span<const uint8_t> bytes, const ModelFingerprint* expected_fingerprint = nullptr,
                          const CodecContext& context = {}, const DecodeExpect& expect = {});

// DecodeKvc straight into `out` (a token range of a longer cache, such as a prefix being
// fetched chunk by chunk), which must have the header's layers, heads, head_dim, tokens and
// position, checked before the codec runs. A file whose dtype differs from `out`'s is decoded
// aside and converted into it. After a failure `out` holds an unspecified mix.
Status DecodeKvcInto(std::span<const uint8_t> bytes, const KvSlice& out,
                     const ModelFingerprint* expected_fingerprint = nullptr, const CodecContext& context = {},
                     const DecodeExpect& expect = {});

// The sections raw, quant, cachegen and video write: 'K' (0x4B) for keys, then 'V' (0x56) unless
// the cache is keys-only.
uint32_t KvSectionTag(KvKind kind);
// kCorrupt unless `file` holds exactly those sections, in that order; their bytes, K first (V
// empty for a keys-only file).
Result<std::array<std::span<const uint8_t>, 2>> KvSections(const KvcFile& file);
inline std::span<const uint8_t> SectionOf(const std::array<std::span<const uint8_t>, 2>& sections, KvKind kind) {
  return sections[kind == KvKind::kKey ? 0 : 1];
}

// Helpers codecs share for parsing EncodeOptions::params.
Result<uint32_t> ParamU32(const EncodeOptions& options, const std::string& key, uint32_t default_value,
                          uint32_t min_value, uint32_t max_value);
Status CheckKnownParams(const EncodeOptions& options, std::span<const std::string_view> known);

}  // namespace kvc
