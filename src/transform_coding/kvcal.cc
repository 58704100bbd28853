#include "transform_coding/kvcal.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstring>

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "base/file_io.h"
#include "tensor/kv_cache.h"

namespace kvc {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'C', 'L'};
// magic + format_version + header_length.
constexpr size_t kPreambleBytes = 12;
// fingerprint, n_layers, n_kv_heads, head_dim, rope (type, n_rot, freq_base, freq_scale),
// keys_rope_undone, grouping, group_size, fit_tokens, heldout_tokens, n_bases, n_allocations.
constexpr size_t kHeaderBodyBytesV1 = 16 + 4 + 4 + 4 + (1 + 4 + 4 + 4) + 1 + 1 + 4 + 4 + 4 + 4 + 4;
static_assert(kHeaderBodyBytesV1 == 63, "docs/format.md documents a 63-byte version 1 header body");
// Version 2 appends quantizer (u8) and chunk_tokens (u32).
constexpr size_t kHeaderBodyBytesV2 = kHeaderBodyBytesV1 + 1 + 4;
// Version 3 (keys only) appends flags (u8).
constexpr size_t kHeaderBodyBytesV3 = kHeaderBodyBytesV2 + 1;
static_assert(kHeaderBodyBytesV3 == 69, "docs/format.md documents a 69-byte version 3 header body");
constexpr size_t HeaderBodyBytes(uint32_t version) {
  return version == 1 ? kHeaderBodyBytesV1 : version == 2 ? kHeaderBodyBytesV2 : kHeaderBodyBytesV3;
}
// tag + length + CRC before each section's data.
constexpr size_t kSectionPrefixBytes = 4 + 8 + 4;
// index, dim, n_components before a basis section's floats.
constexpr size_t kBasisFieldsBytes = 12;
// groups_per_allocation before the allocation records.
constexpr size_t kAllocationsFieldsBytes = 4;
// target_ratio (f32) + heldout_rel_mse (f64) [+ coded_bits_per_value (f64), version 2] before
// each record's bit widths.
constexpr size_t AllocationRecordFixedBytes(uint32_t version) { return version == 1 ? 12 : 20; }
constexpr size_t kAllocationRecordFixedBytes = 20;  // the larger, for bounds

constexpr uint32_t Tag(const char (&s)[5]) {
  return uint32_t{static_cast<uint8_t>(s[0])} | uint32_t{static_cast<uint8_t>(s[1])} << 8 |
         uint32_t{static_cast<uint8_t>(s[2])} << 16 | uint32_t{static_cast<uint8_t>(s[3])} << 24;
}
constexpr uint32_t kTagKeyBasis = Tag("KBAS");
constexpr uint32_t kTagValueBasis = Tag("VBAS");
constexpr uint32_t kTagAllocations = Tag("ALOC");
constexpr uint32_t kTagChoice = Tag("NOTE");  // version 2: the calibration's choice, UTF-8

// No valid file is larger, so LoadKvcal refuses bigger ones before reading them into memory.
constexpr uint64_t kMaxKvcalFileBytes =
    kPreambleBytes + kHeaderBodyBytesV3 + 4 +
    uint64_t{2} * kMaxLayers * kMaxKvHeads * (kSectionPrefixBytes + kBasisFieldsBytes) + 4 * kMaxKvtcFloats +
    kSectionPrefixBytes + kAllocationsFieldsBytes + uint64_t{kMaxKvtcAllocations} * kAllocationRecordFixedBytes +
    kMaxKvtcAllocationBits + kSectionPrefixBytes + kMaxKvtcChoiceBytes;

uint64_t MultiplierCount(KvtcQuantizer quantizer, uint64_t n_components) {
  return quantizer == KvtcQuantizer::kComponent ? n_components * kKvtcWidths : 0;
}

uint64_t BasisDataBytes(uint64_t dim, uint64_t n_components, KvtcQuantizer quantizer) {
  return kBasisFieldsBytes + 4 * (dim + n_components * dim + n_components + MultiplierCount(quantizer, n_components));
}

std::string TagName(uint32_t tag) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const auto c = static_cast<char>(tag >> (8 * i));
    s += c >= 0x20 && c < 0x7f ? c : '?';
  }
  return FormatMessage("0x%08x '%s'", tag, s.c_str());
}

// --- writing ---

void PutFloats(ByteWriter& w, const std::vector<float>& values) {
  if constexpr (std::endian::native == std::endian::little) {
    w.Bytes(values.data(), values.size() * sizeof(float));
  } else {
    for (float v : values) w.F32(v);
  }
}

void PutF64(ByteWriter& w, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  w.U64(bits);
}

// A section being written straight into the file's writer; its CRC is patched in at the end.
struct OpenSection {
  size_t start;
  uint32_t tag;
  uint64_t length;
};

OpenSection BeginSection(ByteWriter& w, uint32_t tag, uint64_t length) {
  const OpenSection section{w.size(), tag, length};
  w.U32(tag);
  w.U64(length);
  w.U32(0);
  return section;
}

void FinishSection(ByteWriter& w, const OpenSection& section) {
  const size_t data_start = section.start + kSectionPrefixBytes;
  const std::span<const uint8_t> data(w.bytes().data() + data_start, w.size() - data_start);
  w.PatchU32(section.start + 4 + 8, SectionCrc(section.tag, section.length, data));
}

// --- reading ---

// Reads one section's prefix and data from `r` and verifies its CRC,
// then its tag, so a damaged tag is reported as damage rather than as a misplaced section.
Status ReadSection(ByteReader& r, uint32_t expected_tag, std::span<const uint8_t>* data) {
  uint32_t tag;
  uint64_t length;
  uint32_t stored_crc;
  RETURN_IF_ERROR(r.U32(&tag, "section tag"));
  RETURN_IF_ERROR(r.U64(&length, "section length"));
  RETURN_IF_ERROR(r.U32(&stored_crc, "section CRC32C"));
  // Compared as u64 before narrowing, so a huge length cannot wrap an offset.
  KVC_CHECK_CORRUPT(length <= r.remaining(), "length %" PRIu64 " exceeds the %zu bytes left", length, r.remaining());
  RETURN_IF_ERROR(r.Bytes(static_cast<size_t>(length), data, "section data"));
  const uint32_t crc = SectionCrc(tag, length, *data);
  KVC_CHECK_CORRUPT(crc == stored_crc, "CRC32C mismatch (stored 0x%08x, computed 0x%08x)", stored_crc, crc);
  KVC_CHECK_CORRUPT(tag == expected_tag, "tag %s where %s belongs", TagName(tag).c_str(),
                    TagName(expected_tag).c_str());
  return Status::Ok();
}

// Reads n little-endian f32 values; the caller has already checked n against the bytes left.
Status GetFloats(ByteReader& r, size_t n, std::vector<float>* out, const char* field) {
  std::span<const uint8_t> raw;
  RETURN_IF_ERROR(r.Bytes(n * sizeof(float), &raw, field));
  out->resize(n);
  if constexpr (std::endian::native == std::endian::little) {
    if (n != 0) std::memcpy(out->data(), raw.data(), raw.size());
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = raw.data() + 4 * i;
      const uint32_t bits = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
      std::memcpy(&(*out)[i], &bits, 4);
    }
  }
  return Status::Ok();
}

// Parses the header body (63, 68 or 69 bytes by version) into `c` (everything but bases and
// allocations).
Status ParseHeaderBody(ByteReader& h, KvtcCalibration* c, uint32_t* n_bases, uint32_t* n_allocations) {
  // c->format_version is set by the caller.
  std::span<const uint8_t> fingerprint;
  RETURN_IF_ERROR(h.Bytes(c->model_fingerprint.size(), &fingerprint, "model fingerprint"));
  std::copy(fingerprint.begin(), fingerprint.end(), c->model_fingerprint.begin());
  RETURN_IF_ERROR(h.U32(&c->n_layers, "n_layers"));
  RETURN_IF_ERROR(h.U32(&c->n_kv_heads, "n_kv_heads"));
  RETURN_IF_ERROR(h.U32(&c->head_dim, "head_dim"));
  uint8_t rope_type;
  RETURN_IF_ERROR(h.U8(&rope_type, "rope type"));
  KVC_CHECK_CORRUPT(rope_type <= static_cast<uint8_t>(kLastRopeType), "unknown rope type %u", rope_type);
  c->rope.type = static_cast<RopeType>(rope_type);
  RETURN_IF_ERROR(h.U32(&c->rope.n_rot, "rope n_rot"));
  RETURN_IF_ERROR(h.F32(&c->rope.freq_base, "rope freq_base"));
  RETURN_IF_ERROR(h.F32(&c->rope.freq_scale, "rope freq_scale"));
  uint8_t undone;
  RETURN_IF_ERROR(h.U8(&undone, "keys_rope_undone"));
  // Only 0 and 1, so that a rewrite reproduces the byte.
  KVC_CHECK_CORRUPT(undone <= 1, "keys_rope_undone is %u, not 0 or 1", undone);
  c->keys_rope_undone = undone == 1;
  uint8_t grouping;
  RETURN_IF_ERROR(h.U8(&grouping, "grouping"));
  KVC_CHECK_CORRUPT(grouping <= static_cast<uint8_t>(KvtcGrouping::kAll), "unknown grouping %u", grouping);
  c->grouping = static_cast<KvtcGrouping>(grouping);
  RETURN_IF_ERROR(h.U32(&c->group_size, "group_size"));
  RETURN_IF_ERROR(h.U32(&c->fit_tokens, "fit_tokens"));
  RETURN_IF_ERROR(h.U32(&c->heldout_tokens, "heldout_tokens"));
  RETURN_IF_ERROR(h.U32(n_bases, "n_bases"));
  RETURN_IF_ERROR(h.U32(n_allocations, "n_allocations"));
  if (c->format_version >= 2) {
    uint8_t quantizer;
    RETURN_IF_ERROR(h.U8(&quantizer, "quantizer"));
    KVC_CHECK_CORRUPT(quantizer <= static_cast<uint8_t>(KvtcQuantizer::kComponent), "unknown quantizer %u", quantizer);
    c->quantizer = static_cast<KvtcQuantizer>(quantizer);
    RETURN_IF_ERROR(h.U32(&c->chunk_tokens, "chunk_tokens"));
  }
  if (c->format_version >= 3) {
    uint8_t flags;
    RETURN_IF_ERROR(h.U8(&flags, "flags"));
    // Unknown bits are refused rather than ignored: a rewrite would drop them, and whatever a
    // later writer meant by them this reader would not honour.
    KVC_CHECK_CORRUPT((flags & ~kKvcalFlagKeysOnly) == 0, "unknown flags 0x%02x", flags);
    c->keys_only = (flags & kKvcalFlagKeysOnly) != 0;
  }
  return Status::Ok();
}

// Parses one basis section's data. Sizes are checked against the grouping, the float budget
// left and the section length before anything is allocated.
Status ParseBasis(std::span<const uint8_t> data, uint32_t expected_index, uint32_t expected_dim,
                  KvtcQuantizer quantizer, uint64_t* floats_left, PcaBasis* b) {
  ByteReader r(data);
  uint32_t index;
  RETURN_IF_ERROR(r.U32(&index, "index"));
  KVC_CHECK_CORRUPT(index == expected_index, "index %u where basis %u belongs", index, expected_index);
  RETURN_IF_ERROR(r.U32(&b->dim, "dim"));
  KVC_CHECK_CORRUPT(b->dim == expected_dim, "dim %u differs from the grouping's basis dimension %u", b->dim,
                    expected_dim);
  RETURN_IF_ERROR(r.U32(&b->n_components, "n_components"));
  KVC_CHECK_CORRUPT(b->n_components >= 1 && b->n_components <= b->dim, "n_components %u outside 1..%u", b->n_components,
                    b->dim);
  const uint64_t n_multipliers = MultiplierCount(quantizer, b->n_components);
  const uint64_t floats = uint64_t{b->dim} + uint64_t{b->n_components} * b->dim + b->n_components + n_multipliers;
  KVC_CHECK_CORRUPT(floats <= *floats_left, "%" PRIu64 " floats exceed the %" PRIu64 " left of the limit %" PRIu64,
                    floats, *floats_left, kMaxKvtcFloats);
  const uint64_t expected_length = BasisDataBytes(b->dim, b->n_components, quantizer);
  KVC_CHECK_CORRUPT(data.size() == expected_length,
                    "section length %zu disagrees with dim %u and n_components %u (%" PRIu64 " bytes)", data.size(),
                    b->dim, b->n_components, expected_length);
  *floats_left -= floats;
  RETURN_IF_ERROR(GetFloats(r, b->dim, &b->mean, "mean"));
  RETURN_IF_ERROR(GetFloats(r, size_t{b->n_components} * b->dim, &b->components, "components"));
  RETURN_IF_ERROR(GetFloats(r, b->n_components, &b->eigenvalues, "eigenvalues"));
  RETURN_IF_ERROR(GetFloats(r, static_cast<size_t>(n_multipliers), &b->step_multipliers, "step multipliers"));
  return Status::Ok();
}

Status ParseAllocations(std::span<const uint8_t> data, uint32_t version, uint32_t n_allocations, uint64_t total_groups,
                        std::vector<BitAllocation>* out) {
  ByteReader r(data);
  uint32_t groups;
  RETURN_IF_ERROR(r.U32(&groups, "groups_per_allocation"));
  KVC_CHECK_CORRUPT(groups == total_groups, "groups_per_allocation %u, but the bases have %" PRIu64 " groups", groups,
                    total_groups);
  KVC_CHECK_CORRUPT(uint64_t{n_allocations} * groups <= kMaxKvtcAllocationBits,
                    "%u allocations of %u groups exceed the limit of %" PRIu64 " bit widths", n_allocations, groups,
                    kMaxKvtcAllocationBits);
  const uint64_t expected_length =
      kAllocationsFieldsBytes + uint64_t{n_allocations} * (AllocationRecordFixedBytes(version) + groups);
  KVC_CHECK_CORRUPT(data.size() == expected_length,
                    "section length %zu disagrees with %u allocations of %u groups (%" PRIu64 " bytes)", data.size(),
                    n_allocations, groups, expected_length);
  out->resize(n_allocations);
  for (uint32_t j = 0; j < n_allocations; ++j) {
    BitAllocation& a = (*out)[j];
    uint64_t mse_bits;
    RETURN_IF_ERROR(r.F32(&a.target_ratio, "target_ratio"));
    RETURN_IF_ERROR(r.U64(&mse_bits, "heldout_rel_mse"));
    std::memcpy(&a.heldout_rel_mse, &mse_bits, 8);
    if (version >= 2) {
      uint64_t coded_bits;
      RETURN_IF_ERROR(r.U64(&coded_bits, "coded_bits_per_value"));
      std::memcpy(&a.coded_bits_per_value, &coded_bits, 8);
    }
    std::span<const uint8_t> bits;
    RETURN_IF_ERROR(r.Bytes(groups, &bits, "bits"));
    a.bits.assign(bits.begin(), bits.end());
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<uint8_t>> WriteKvcal(const KvtcCalibration& c) {
  RETURN_IF_ERROR(ValidateCalibration(c));

  ByteWriter w;
  w.Bytes(kMagic, sizeof(kMagic));
  const uint32_t version = c.format_version;
  w.U32(version);
  w.U32(static_cast<uint32_t>(HeaderBodyBytes(version)));
  w.Bytes(c.model_fingerprint.data(), c.model_fingerprint.size());
  w.U32(c.n_layers);
  w.U32(c.n_kv_heads);
  w.U32(c.head_dim);
  w.U8(static_cast<uint8_t>(c.rope.type));
  w.U32(c.rope.n_rot);
  w.F32(c.rope.freq_base);
  w.F32(c.rope.freq_scale);
  w.U8(c.keys_rope_undone ? 1 : 0);
  w.U8(static_cast<uint8_t>(c.grouping));
  w.U32(c.group_size);
  w.U32(c.fit_tokens);
  w.U32(c.heldout_tokens);
  w.U32(c.n_bases());
  w.U32(static_cast<uint32_t>(c.allocations.size()));
  if (version >= 2) {
    w.U8(static_cast<uint8_t>(c.quantizer));
    w.U32(c.chunk_tokens);
  }
  if (version >= 3) w.U8(c.keys_only ? kKvcalFlagKeysOnly : 0);
  w.U32(Crc32c(w.bytes().data(), w.size()));

  const uint32_t n_bases = c.n_bases();
  uint64_t total_groups = 0;
  for (size_t i = 0; i < c.bases.size(); ++i) {
    const PcaBasis& b = c.bases[i];
    const bool key = i < n_bases;
    const OpenSection section =
        BeginSection(w, key ? kTagKeyBasis : kTagValueBasis, BasisDataBytes(b.dim, b.n_components, c.quantizer));
    w.U32(static_cast<uint32_t>(key ? i : i - n_bases));
    w.U32(b.dim);
    w.U32(b.n_components);
    PutFloats(w, b.mean);
    PutFloats(w, b.components);
    PutFloats(w, b.eigenvalues);
    PutFloats(w, b.step_multipliers);
    FinishSection(w, section);
    total_groups += c.n_groups(static_cast<uint32_t>(i));
  }

  const OpenSection allocations = BeginSection(
      w, kTagAllocations,
      kAllocationsFieldsBytes + c.allocations.size() * (AllocationRecordFixedBytes(version) + total_groups));
  w.U32(static_cast<uint32_t>(total_groups));
  for (const BitAllocation& a : c.allocations) {
    w.F32(a.target_ratio);
    PutF64(w, a.heldout_rel_mse);
    if (version >= 2) PutF64(w, a.coded_bits_per_value);
    w.Bytes(a.bits);
  }
  FinishSection(w, allocations);
  if (version >= 2) {
    const OpenSection choice = BeginSection(w, kTagChoice, c.choice.size());
    w.Bytes(reinterpret_cast<const uint8_t*>(c.choice.data()), c.choice.size());
    FinishSection(w, choice);
  }
  return w.Take();
}

Result<KvtcCalibration> ReadKvcal(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  // Peeked before the checked read so each version is parsed with its own header length.
  uint32_t version = kKvcalFormatVersion;
  if (bytes.size() >= 8 && std::equal(kMagic, kMagic + 4, bytes.begin())) {
    const uint32_t found =
        uint32_t{bytes[4]} | uint32_t{bytes[5]} << 8 | uint32_t{bytes[6]} << 16 | uint32_t{bytes[7]} << 24;
    if (found < 1 || found > kKvcalMaxFormatVersion) {
      return Unsupported(
          FormatMessage("format version %u not supported (this build reads 1 to %u)", found, kKvcalMaxFormatVersion));
    }
    version = found;
  }
  ASSIGN_OR_RETURN(const std::span<const uint8_t> body,
                   ReadCheckedHeader(r, bytes, std::span(kMagic), version, ".kvcal", HeaderBodyBytes(version),
                                     HeaderBodyBytes(version)));

  KvtcCalibration c;
  c.format_version = version;
  uint32_t n_bases = 0;
  uint32_t n_allocations = 0;
  ByteReader header_reader(body);
  if (Status s = ParseHeaderBody(header_reader, &c, &n_bases, &n_allocations); !s.ok()) return s.WithContext("header");
  if (Status s = ValidateCalibrationHeader(c); !s.ok()) return Corrupt("header: " + s.message());
  KVC_CHECK_CORRUPT(n_bases == c.n_bases(), "header: n_bases %u, but grouping %s of this shape has %u", n_bases,
                    KvtcGroupingName(c.grouping), c.n_bases());
  KVC_CHECK_CORRUPT(n_allocations <= kMaxKvtcAllocations, "header: %u allocations exceed the limit %u", n_allocations,
                    kMaxKvtcAllocations);

  // The smallest bases this header allows must be present before any is reserved, so a
  // header claiming a million bases in a short file fails here rather than allocating.
  // ValidateCalibrationHeader has bounded n_bases times the kinds (by the float limit), so the
  // count below fits 32 bits.
  const uint32_t dim = c.basis_dim();
  const uint32_t total_bases = c.n_kinds() * n_bases;
  const uint64_t min_bytes = uint64_t{total_bases} * (kSectionPrefixBytes + BasisDataBytes(dim, 1, c.quantizer)) +
                             kSectionPrefixBytes + kAllocationsFieldsBytes +
                             uint64_t{n_allocations} * AllocationRecordFixedBytes(version);
  KVC_CHECK_CORRUPT(min_bytes <= r.remaining(),
                    "truncated: %u bases of dimension %u and %u allocations need at least %" PRIu64
                    " bytes after the header, %zu present",
                    total_bases, dim, n_allocations, min_bytes, r.remaining());

  c.bases.resize(total_bases);
  uint64_t floats_left = kMaxKvtcFloats;
  uint64_t total_groups = 0;
  // A keys-only file has no V bases: after its K bases comes the allocations section.
  for (uint32_t i = 0; i < total_bases; ++i) {
    const bool key = i < n_bases;
    const uint32_t within = key ? i : i - n_bases;
    const std::string where = FormatMessage("%s basis %u", key ? "K" : "V", within);
    std::span<const uint8_t> data;
    if (Status s = ReadSection(r, key ? kTagKeyBasis : kTagValueBasis, &data); !s.ok()) {
      return s.WithContext(where);
    }
    if (Status s = ParseBasis(data, within, dim, c.quantizer, &floats_left, &c.bases[i]); !s.ok()) {
      return s.WithContext(where);
    }
    total_groups += c.n_groups(i);
  }

  std::span<const uint8_t> data;
  if (Status s = ReadSection(r, kTagAllocations, &data); !s.ok()) return s.WithContext("allocations");
  if (Status s = ParseAllocations(data, version, n_allocations, total_groups, &c.allocations); !s.ok()) {
    return s.WithContext("allocations");
  }
  if (version >= 2) {
    std::span<const uint8_t> note;
    if (Status s = ReadSection(r, kTagChoice, &note); !s.ok()) return s.WithContext("choice");
    KVC_CHECK_CORRUPT(note.size() <= kMaxKvtcChoiceBytes, "choice: %zu bytes, over %u", note.size(),
                      kMaxKvtcChoiceBytes);
    c.choice.assign(note.begin(), note.end());
  }
  KVC_CHECK_CORRUPT(r.empty(), "%zu trailing bytes after the last section (at offset %zu)", r.remaining(), r.offset());

  if (Status s = ValidateCalibration(c); !s.ok()) return Corrupt(s.message());
  return c;
}

Hash128 KvcalHash(std::span<const uint8_t> file_bytes) { return Xxh3_128(file_bytes.data(), file_bytes.size()); }

Status SaveKvcal(const KvtcCalibration& calibration, const std::string& path) {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, WriteKvcal(calibration));
  return ReplaceFileAtomically(path, bytes);
}

Result<KvtcCalibration> LoadKvcal(const std::string& path, Hash128* hash_out) {
  // Any file that cannot be read as a whole (missing, a folder, past the largest possible .kvcal)
  // is an I/O error to the callers; what the bytes say is parsed below.
  auto read = ReadFileBytes(path, kMaxKvcalFileBytes);
  if (!read.ok()) return IoError(read.status().message());
  const std::vector<uint8_t>& bytes = *read;

  Result<KvtcCalibration> calibration = ReadKvcal(bytes);
  if (!calibration.ok()) return calibration.status().WithContext(path);
  if (hash_out != nullptr) *hash_out = KvcalHash(bytes);
  return calibration;
}

Status CheckCalibrationModel(const KvtcCalibration& calibration, const ModelFingerprint& model) {
  if (calibration.model_fingerprint == model) return Status::Ok();
  return InvalidArgument("calibration was made for model " + HexString(calibration.model_fingerprint) +
                         ", not for this model " + HexString(model));
}

}  // namespace kvc
