// The .kvc container: one encoded token range of one model's KV cache, self-describing.
// Layout and every field: docs/format.md. The reader treats every byte as hostile.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/byte_io.h"
#include "base/status.h"
#include "tensor/kv_cache.h"

namespace kvc {

inline constexpr uint32_t kKvcFormatVersion = 1;
inline constexpr size_t kMaxCodecParamsBytes = 1 << 20;
inline constexpr size_t kMaxLevelNameBytes = 64;
// Level names (and codec names, which share them in object names and manifests) are at most 64
// bytes of [A-Za-z0-9._+-]. They reach error messages, JSON, file and object names: restricted
// to these bytes they can hold no control character, quote, path separator or broken UTF-8.
inline constexpr std::string_view kNameChars = "A-Za-z0-9._+-";
bool IsNameChar(char c);
// InvalidArgument naming the first byte outside the charset (as \xNN) and its offset, or the
// length if it exceeds kMaxLevelNameBytes. `what` names the field ("level").
Status CheckName(std::string_view name, const char* what);
inline constexpr uint32_t kMaxSections = 4096;
// Set in the header's dtype byte when the file holds keys only (KvShape::keys_only): a bit no
// dtype uses, so every file without it reads as before.
inline constexpr uint8_t kKvcKeysOnlyBit = 0x80;

using ModelFingerprint = std::array<uint8_t, 16>;

struct KvcHeader {
  uint16_t codec_id = 0;
  uint16_t codec_version = 0;
  std::string level;                  // the quality level the codec encoded at, e.g. "8"
  std::vector<uint8_t> codec_params;  // opaque to the container; the codec parses it
  KvShape shape;                      // shape.n_tokens = tokens covered
  DType dtype = DType::kF16;          // dtype the decoder restores to
  ModelFingerprint model_fingerprint{};
  uint32_t token_begin = 0;  // index of the first covered token in the source sequence
  int32_t pos_begin = 0;     // position of the first covered token

  bool operator==(const KvcHeader&) const = default;
};

struct KvcSection {
  uint32_t tag = 0;  // codec-defined meaning
  std::vector<uint8_t> bytes;
};

struct KvcSectionView {
  uint32_t tag = 0;
  std::span<const uint8_t> bytes;  // points into the buffer given to ReadKvc
};

struct KvcFile {
  KvcHeader header;
  std::vector<KvcSectionView> sections;
};

// The CRC32C every kvcodec section carries (.kvc and .kvcal alike): over its tag (u32 LE),
// its length (u64 LE) and its data, so a damaged tag or length cannot pass for another section.
uint32_t SectionCrc(uint32_t tag, uint64_t length, std::span<const uint8_t> data);

// Reads the start every kvcodec file shares (.kvc, .kvcal): magic, u32 format version, u32
// header_length within [min_body, max_body], the header body, and a CRC32C over all of that,
// which is verified before any field is trusted. Returns the body, a view into `file`; `r`
// must be positioned at the start of `file`.
Result<std::span<const uint8_t>> ReadCheckedHeader(ByteReader& r, std::span<const uint8_t> file,
                                                   std::span<const uint8_t> magic, uint32_t version, const char* format,
                                                   size_t min_body, size_t max_body);

// Serialises header and sections; fails (kInvalidArgument) on values the format cannot hold,
// and on every value ReadKvc would reject (a level outside the name charset included).
Result<std::vector<uint8_t>> WriteKvc(const KvcHeader& header, const std::vector<KvcSection>& sections);

// Parses and verifies (magic, version, limits, header CRC, the level's charset, every
// section CRC, no trailing bytes). The returned section spans point into `bytes`, which must outlive the result.
Result<KvcFile> ReadKvc(std::span<const uint8_t> bytes);

}  // namespace kvc
