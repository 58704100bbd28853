#include "serve/slot_record.h"

#include "base/byte_io.h"
#include "base/hash.h"
#include "base/utf8.h"

namespace kvc {
namespace {

constexpr uint8_t kMagic[8] = {'K', 'V', 'C', 'S', 'L', 'O', 'T', 0};
constexpr uint32_t kVersion = 1;

}  // namespace

std::vector<uint8_t> SerializeSlotRecord(const SlotRecord& record) {
  ByteWriter w;
  w.Bytes(kMagic, sizeof kMagic);
  w.U32(kVersion);
  w.Bytes(record.model.data(), record.model.size());
  w.U32(static_cast<uint32_t>(record.tokens.size()));
  for (const int32_t t : record.tokens) w.I32(t);
  return w.Take();
}

Result<SlotRecord> ParseSlotRecord(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  RETURN_IF_ERROR(ExpectMagicAndVersion(r, kMagic, kVersion, "slot record"));
  SlotRecord out;
  std::span<const uint8_t> model;
  RETURN_IF_ERROR(r.Bytes(out.model.size(), &model, "model fingerprint"));
  std::copy(model.begin(), model.end(), out.model.begin());
  uint32_t n = 0;
  RETURN_IF_ERROR(r.U32(&n, "token count"));
  KVC_CHECK_CORRUPT(n <= kMaxSlotRecordTokens, "slot record of %u tokens (at most %u)", n, kMaxSlotRecordTokens);
  KVC_CHECK_CORRUPT(r.remaining() == uint64_t{n} * 4, "slot record of %u tokens holds %zu bytes of them", n,
                    r.remaining());
  out.tokens.resize(n);
  for (int32_t& t : out.tokens) {
    RETURN_IF_ERROR(r.I32(&t, "token"));
    KVC_CHECK_CORRUPT(t >= 0, "slot record holds token id %d", t);
  }
  return out;
}

Status CheckSlotFileName(std::string_view name) {
  if (name.empty() || name.size() > 255) return InvalidArgument("a slot file name must be 1..255 bytes");
  if (!IsValidUtf8(name)) return InvalidArgument("a slot file name must be valid UTF-8");
  if (name.front() == '.') return InvalidArgument("a slot file name must not start with a dot");
  for (const char c : name) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgument("a slot file name must not hold a path separator or a control character");
    }
  }
  return Status::Ok();
}

std::string SlotRecordObjectName(const ModelFingerprint& model, std::string_view file_name) {
  // The name hashed: store object names have their own rules (Redis keys, file names on disk),
  // and the record holds nothing the name must carry.
  Xxh3Hasher h;
  h.Update(file_name.data(), file_name.size());
  return "slot-" + HexString(model) + "-" + HexString(h.Digest());
}

}  // namespace kvc
