#include "store/stored_object.h"

#include <algorithm>
#include <string>

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "base/utf8.h"
#include "store/hmac_sha256.h"
#include "store/store.h"

namespace kvc {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'C', 'O'};
constexpr size_t kCrcBytes = 4;

std::span<const uint8_t> AsBytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

size_t SealBytes(ObjectSeal seal) { return seal == ObjectSeal::kCrc32c ? kCrcBytes : kHmacSha256Bytes; }

}  // namespace

size_t StoredObjectOverhead(std::string_view name, ObjectSeal seal) {
  // magic, version, seal, name length, name, payload length; the seal after the payload.
  return 4 + 4 + 4 + 4 + name.size() + 8 + SealBytes(seal);
}

Result<std::vector<uint8_t>> SealStoredObject(std::string_view name, std::span<const uint8_t> payload,
                                              std::string_view secret) {
  RETURN_IF_ERROR(CheckObjectName(name));
  const ObjectSeal seal = secret.empty() ? ObjectSeal::kCrc32c : ObjectSeal::kHmacSha256;
  ByteWriter w;
  w.Bytes(kMagic, sizeof(kMagic));
  w.U32(kStoredObjectVersion);
  w.U32(static_cast<uint32_t>(seal));
  w.String(name);
  w.U64(payload.size());
  w.Bytes(payload);
  if (seal == ObjectSeal::kCrc32c) {
    w.U32(Crc32c(w.bytes().data(), w.size()));
  } else {
    ASSIGN_OR_RETURN(const HmacSha256Tag tag, HmacSha256(AsBytes(secret), w.bytes()));
    w.Bytes(tag.data(), tag.size());
  }
  return w.Take();
}

Result<std::span<const uint8_t>> OpenStoredObject(std::string_view name, std::span<const uint8_t> object,
                                                  std::string_view secret) {
  const std::string where = "stored object '" + PrintableOneLine(name) + "'";
  const char* w = where.c_str();
  // Bytes that do not even start like an envelope: most likely an object of a kvcodec from
  // before envelopes (a bare .kvc or manifest), which must be recomputed, not decoded.
  KVC_CHECK_CORRUPT(object.size() >= sizeof(kMagic) && std::equal(kMagic, kMagic + sizeof(kMagic), object.begin()),
                    "%s: not a kvcodec stored object (bad magic; it may come from an older kvcodec)", w);
  ByteReader r(object.subspan(sizeof(kMagic)));
  auto in_context = [&](const Status& s) { return Corrupt(where + ": " + s.message()); };
  uint32_t version = 0;
  uint32_t seal_field = 0;
  std::string stored_name;
  uint64_t payload_bytes = 0;
  if (Status s = r.U32(&version, "version"); !s.ok()) return in_context(s);
  KVC_CHECK_CORRUPT(version == kStoredObjectVersion,
                    "%s: stored-object version %u, this build reads %u (it may come from an older or newer kvcodec)", w,
                    version, kStoredObjectVersion);
  if (Status s = r.U32(&seal_field, "seal"); !s.ok()) return in_context(s);
  KVC_CHECK_CORRUPT(seal_field == static_cast<uint32_t>(ObjectSeal::kCrc32c) ||
                        seal_field == static_cast<uint32_t>(ObjectSeal::kHmacSha256),
                    "%s: unknown seal %u (1: CRC32C, 2: HMAC-SHA256)", w, seal_field);
  const auto seal = static_cast<ObjectSeal>(seal_field);
  if (Status s = r.String(&stored_name, kMaxObjectNameBytes, "name"); !s.ok()) return in_context(s);
  KVC_CHECK_CORRUPT(!stored_name.empty(), "%s: empty name", w);
  if (Status s = r.U64(&payload_bytes, "payload length"); !s.ok()) return in_context(s);
  const size_t seal_bytes = SealBytes(seal);
  // remaining() - seal_bytes only once remaining() >= seal_bytes: no wrap-around.
  KVC_CHECK_CORRUPT(r.remaining() >= seal_bytes && payload_bytes <= r.remaining() - seal_bytes,
                    "%s: truncated (%llu payload bytes and a %zu-byte seal announced, %zu bytes left)", w,
                    static_cast<unsigned long long>(payload_bytes), seal_bytes, r.remaining());
  KVC_CHECK_CORRUPT(payload_bytes == r.remaining() - seal_bytes, "%s: %zu bytes after the end", w,
                    static_cast<size_t>(r.remaining() - seal_bytes - payload_bytes));
  const size_t payload_offset = sizeof(kMagic) + r.offset();
  const std::span<const uint8_t> sealed = object.first(object.size() - seal_bytes);
  const std::span<const uint8_t> seal_value = object.last(seal_bytes);

  // Whether the object may be trusted is decided before anything in it (its name) is believed.
  if (secret.empty()) {
    KVC_CHECK_CORRUPT(seal == ObjectSeal::kCrc32c,
                      "%s: sealed with a secret (HMAC-SHA256), and this store has none (--store-secret)", w);
    uint32_t crc = 0;
    ByteReader crc_reader(seal_value);
    RETURN_IF_ERROR(crc_reader.U32(&crc, "crc"));
    KVC_CHECK_CORRUPT(crc == Crc32c(sealed.data(), sealed.size()), "%s: CRC32C mismatch (damaged)", w);
  } else {
    KVC_CHECK_CORRUPT(seal == ObjectSeal::kHmacSha256,
                      "%s: not authenticated by this store's secret (sealed with a CRC32C only: written without "
                      "--store-secret)",
                      w);
    ASSIGN_OR_RETURN(const HmacSha256Tag expected, HmacSha256(AsBytes(secret), sealed));
    KVC_CHECK_CORRUPT(EqualInConstantTime(expected, seal_value),
                      "%s: not authenticated by this store's secret (HMAC-SHA256 mismatch: damaged, forged or "
                      "written with another secret)",
                      w);
  }
  KVC_CHECK_CORRUPT(stored_name == name, "stored object holds chunk '%s', read as '%s'",
                    PrintableOneLine(stored_name).c_str(), PrintableOneLine(name).c_str());
  return object.subspan(payload_offset, static_cast<size_t>(payload_bytes));
}

}  // namespace kvc
