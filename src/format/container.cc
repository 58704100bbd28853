#include "format/container.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <limits>

#include "base/byte_io.h"
#include "base/crc32c.h"

namespace kvc {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'C', '1'};
// magic + format_version + header_length: the part before the header body.
constexpr size_t kPreambleBytes = 12;
// Header body without the variable-length level and params bytes.
constexpr size_t kHeaderBodyFixedBytes = 2 + 2 + 4 + 4 + 4 * 4 + 1 + 16 + 4 + 4 + 4;
constexpr size_t kHeaderBodyMaxBytes = kHeaderBodyFixedBytes + kMaxLevelNameBytes + kMaxCodecParamsBytes;
// tag + length + crc before each section's bytes.
constexpr size_t kSectionPrefixBytes = 4 + 8 + 4;

// The section CRC covers the tag and length as well as the bytes: the tag and length are not
// under the header CRC, and a flipped tag that still passed would hand a codec the wrong
// section.
// Checks shared by writer and reader, so WriteKvc never emits what ReadKvc rejects. Returns
// the message of the first violation; the caller picks the status code.
Status CheckHeaderFields(const KvcHeader& h, size_t n_sections) {
  RETURN_IF_ERROR(CheckName(h.level, "level"));
  if (h.codec_params.size() > kMaxCodecParamsBytes) {
    return InvalidArgument(
        FormatMessage("codec params length %zu exceeds the limit %zu", h.codec_params.size(), kMaxCodecParamsBytes));
  }
  const auto dtype_value = static_cast<uint8_t>(h.dtype);
  if (!IsValidDType(dtype_value)) return InvalidArgument(FormatMessage("unknown dtype %u", dtype_value));
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) return InvalidArgument("shape: " + s.message());
  // Tokens occupy consecutive indices and positions, so the last one must be representable.
  if (uint64_t{h.token_begin} + h.shape.n_tokens > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument(FormatMessage("token range [%u, +%u) overflows 32 bits", h.token_begin, h.shape.n_tokens));
  }
  if (int64_t{h.pos_begin} + h.shape.n_tokens > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument(FormatMessage("position range [%d, +%u) overflows int32", h.pos_begin, h.shape.n_tokens));
  }
  if (n_sections > kMaxSections) {
    return InvalidArgument(FormatMessage("%zu sections exceed the limit %u", n_sections, kMaxSections));
  }
  return Status::Ok();
}

// Parses the header body from a reader that holds exactly header_length bytes.
Status ParseHeaderBody(ByteReader& r, KvcHeader* h, uint32_t* n_sections) {
  RETURN_IF_ERROR(r.U16(&h->codec_id, "codec_id"));
  RETURN_IF_ERROR(r.U16(&h->codec_version, "codec_version"));
  RETURN_IF_ERROR(r.String(&h->level, kMaxLevelNameBytes, "level"));
  uint32_t params_len;
  RETURN_IF_ERROR(r.U32(&params_len, "codec params length"));
  KVC_CHECK_CORRUPT(params_len <= kMaxCodecParamsBytes, "codec params length %u exceeds the limit %zu", params_len,
                    kMaxCodecParamsBytes);
  std::span<const uint8_t> params;
  RETURN_IF_ERROR(r.Bytes(params_len, &params, "codec params"));
  h->codec_params.assign(params.begin(), params.end());
  RETURN_IF_ERROR(r.U32(&h->shape.n_layers, "n_layers"));
  RETURN_IF_ERROR(r.U32(&h->shape.n_kv_heads, "n_kv_heads"));
  RETURN_IF_ERROR(r.U32(&h->shape.head_dim, "head_dim"));
  RETURN_IF_ERROR(r.U32(&h->shape.n_tokens, "n_tokens"));
  uint8_t dtype;
  RETURN_IF_ERROR(r.U8(&dtype, "dtype"));
  h->shape.keys_only = (dtype & kKvcKeysOnlyBit) != 0;
  dtype &= static_cast<uint8_t>(~kKvcKeysOnlyBit);
  KVC_CHECK_CORRUPT(IsValidDType(dtype), "unknown dtype %u", dtype);
  h->dtype = static_cast<DType>(dtype);
  std::span<const uint8_t> fingerprint;
  RETURN_IF_ERROR(r.Bytes(h->model_fingerprint.size(), &fingerprint, "model fingerprint"));
  std::copy(fingerprint.begin(), fingerprint.end(), h->model_fingerprint.begin());
  RETURN_IF_ERROR(r.U32(&h->token_begin, "token_begin"));
  RETURN_IF_ERROR(r.I32(&h->pos_begin, "pos_begin"));
  RETURN_IF_ERROR(r.U32(n_sections, "n_sections"));
  return Status::Ok();
}

std::string SectionName(uint32_t index, uint32_t tag) { return FormatMessage("section %u (tag 0x%08x)", index, tag); }

}  // namespace

bool IsNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '+' || c == '-';
}

Status CheckName(std::string_view name, const char* what) {
  if (name.size() > kMaxLevelNameBytes) {
    return InvalidArgument(
        FormatMessage("%s name length %zu exceeds the limit %zu", what, name.size(), kMaxLevelNameBytes));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i])) {
      // The byte itself is never echoed: only its value, so the message stays one plain line.
      return InvalidArgument(FormatMessage("%s name holds byte 0x%02x at offset %zu (allowed: %.*s)", what,
                                           static_cast<unsigned>(static_cast<uint8_t>(name[i])), i,
                                           static_cast<int>(kNameChars.size()), kNameChars.data()));
    }
  }
  return Status::Ok();
}

uint32_t SectionCrc(uint32_t tag, uint64_t length, std::span<const uint8_t> data) {
  ByteWriter prefix;
  prefix.U32(tag);
  prefix.U64(length);
  const uint32_t crc = Crc32c(prefix.bytes().data(), prefix.size());
  return Crc32cExtend(crc, data.data(), data.size());
}

Result<std::span<const uint8_t>> ReadCheckedHeader(ByteReader& r, std::span<const uint8_t> file,
                                                   std::span<const uint8_t> magic, uint32_t version, const char* format,
                                                   size_t min_body, size_t max_body) {
  RETURN_IF_ERROR(ExpectMagicAndVersion(r, magic, version, format));
  const size_t preamble = r.offset() + 4;  // magic, version, header_length
  uint32_t header_length;
  RETURN_IF_ERROR(r.U32(&header_length, "header_length"));
  if (min_body == max_body) {
    KVC_CHECK_CORRUPT(header_length == min_body, "header_length %u is not %zu", header_length, min_body);
  } else {
    KVC_CHECK_CORRUPT(header_length >= min_body && header_length <= max_body, "header_length %u outside [%zu, %zu]",
                      header_length, min_body, max_body);
  }
  std::span<const uint8_t> body;
  RETURN_IF_ERROR(r.Bytes(header_length, &body, "header body"));
  uint32_t stored_crc;
  RETURN_IF_ERROR(r.U32(&stored_crc, "header CRC32C"));
  // Verified before any field is trusted, so a damaged header reports the damage rather than
  // whichever field it happened to hit.
  const uint32_t crc = Crc32c(file.data(), preamble + header_length);
  KVC_CHECK_CORRUPT(crc == stored_crc, "header: CRC32C mismatch (stored 0x%08x, computed 0x%08x)", stored_crc, crc);
  return body;
}

Result<std::vector<uint8_t>> WriteKvc(const KvcHeader& header, const std::vector<KvcSection>& sections) {
  RETURN_IF_ERROR(CheckHeaderFields(header, sections.size()));

  ByteWriter w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.U32(kKvcFormatVersion);
  const size_t header_length_at = w.size();
  w.U32(0);
  w.U16(header.codec_id);
  w.U16(header.codec_version);
  w.String(header.level);
  w.U32(static_cast<uint32_t>(header.codec_params.size()));
  w.Bytes(header.codec_params);
  w.U32(header.shape.n_layers);
  w.U32(header.shape.n_kv_heads);
  w.U32(header.shape.head_dim);
  w.U32(header.shape.n_tokens);
  w.U8(static_cast<uint8_t>(static_cast<uint8_t>(header.dtype) | (header.shape.keys_only ? kKvcKeysOnlyBit : 0)));
  w.Bytes(header.model_fingerprint.data(), header.model_fingerprint.size());
  w.U32(header.token_begin);
  w.I32(header.pos_begin);
  w.U32(static_cast<uint32_t>(sections.size()));
  w.PatchU32(header_length_at, static_cast<uint32_t>(w.size() - kPreambleBytes));
  w.U32(Crc32c(w.bytes().data(), w.size()));

  for (const KvcSection& section : sections) {
    const uint64_t length = section.bytes.size();
    w.U32(section.tag);
    w.U64(length);
    w.U32(SectionCrc(section.tag, length, section.bytes));
    w.Bytes(section.bytes);
  }
  return w.Take();
}

Result<KvcFile> ReadKvc(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  ASSIGN_OR_RETURN(const std::span<const uint8_t> body,
                   ReadCheckedHeader(r, bytes, std::span(kMagic), kKvcFormatVersion, ".kvc", kHeaderBodyFixedBytes,
                                     kHeaderBodyMaxBytes));

  KvcFile file;
  uint32_t n_sections = 0;
  ByteReader body_reader(body);
  if (Status s = ParseHeaderBody(body_reader, &file.header, &n_sections); !s.ok()) {
    return s.WithContext("header");
  }
  KVC_CHECK_CORRUPT(body_reader.empty(), "header_length %u disagrees with the header fields (%zu bytes)",
                    static_cast<unsigned>(body.size()), body_reader.offset());
  if (Status s = CheckHeaderFields(file.header, n_sections); !s.ok()) {
    return Corrupt("header: " + s.message());
  }

  // Every section needs at least its prefix, which bounds the reservation by the input size.
  file.sections.reserve(std::min<size_t>(n_sections, r.remaining() / kSectionPrefixBytes));
  for (uint32_t i = 0; i < n_sections; ++i) {
    uint32_t tag;
    uint64_t length;
    uint32_t stored_crc;
    if (Status s = r.U32(&tag, "section tag"); !s.ok()) return s.WithContext(FormatMessage("section %u", i));
    if (Status s = r.U64(&length, "section length"); !s.ok()) return s.WithContext(SectionName(i, tag));
    if (Status s = r.U32(&stored_crc, "section CRC32C"); !s.ok()) return s.WithContext(SectionName(i, tag));
    // Compared as u64 before narrowing, so a huge length cannot wrap an offset.
    KVC_CHECK_CORRUPT(length <= r.remaining(), "%s: length %" PRIu64 " exceeds the %zu bytes left",
                      SectionName(i, tag).c_str(), length, r.remaining());
    KvcSectionView view;
    view.tag = tag;
    RETURN_IF_ERROR(r.Bytes(static_cast<size_t>(length), &view.bytes, "section bytes"));
    KVC_CHECK_CORRUPT(SectionCrc(tag, length, view.bytes) == stored_crc, "%s: CRC32C mismatch",
                      SectionName(i, tag).c_str());
    file.sections.push_back(view);
  }
  KVC_CHECK_CORRUPT(r.empty(), "%zu trailing bytes after the last section (at offset %zu)", r.remaining(), r.offset());
  return file;
}

}  // namespace kvc
