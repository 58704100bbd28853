#include "base/byte_io.h"

#include <algorithm>

namespace kvc {

Status ByteReader::Need(size_t n, const char* field) const {
  if (n > remaining()) {
    return Corrupt(
        FormatMessage("truncated reading %s at offset %zu (need %zu bytes, have %zu)", field, offset_, n, remaining()));
  }
  return Status::Ok();
}

uint64_t ByteReader::GetLe(int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[offset_ + i]) << (8 * i);
  offset_ += n;
  return v;
}

Status ByteReader::U8(uint8_t* out, const char* field) {
  RETURN_IF_ERROR(Need(1, field));
  *out = static_cast<uint8_t>(GetLe(1));
  return Status::Ok();
}

Status ByteReader::U16(uint16_t* out, const char* field) {
  RETURN_IF_ERROR(Need(2, field));
  *out = static_cast<uint16_t>(GetLe(2));
  return Status::Ok();
}

Status ByteReader::U32(uint32_t* out, const char* field) {
  RETURN_IF_ERROR(Need(4, field));
  *out = static_cast<uint32_t>(GetLe(4));
  return Status::Ok();
}

Status ByteReader::U64(uint64_t* out, const char* field) {
  RETURN_IF_ERROR(Need(8, field));
  *out = GetLe(8);
  return Status::Ok();
}

Status ByteReader::I32(int32_t* out, const char* field) {
  uint32_t v;
  RETURN_IF_ERROR(U32(&v, field));
  *out = static_cast<int32_t>(v);
  return Status::Ok();
}

Status ByteReader::F32(float* out, const char* field) {
  uint32_t v;
  RETURN_IF_ERROR(U32(&v, field));
  std::memcpy(out, &v, 4);
  return Status::Ok();
}

Status ByteReader::Bytes(size_t n, std::span<const uint8_t>* out, const char* field) {
  RETURN_IF_ERROR(Need(n, field));
  *out = data_.subspan(offset_, n);
  offset_ += n;
  return Status::Ok();
}

Status ByteReader::String(std::string* out, size_t max_len, const char* field) {
  uint32_t len;
  RETURN_IF_ERROR(U32(&len, field));
  KVC_CHECK_CORRUPT(len <= max_len, "%s length %u exceeds the limit %zu", field, len, max_len);
  std::span<const uint8_t> bytes;
  RETURN_IF_ERROR(Bytes(len, &bytes, field));
  out->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return Status::Ok();
}

Status ByteReader::Skip(size_t n, const char* field) {
  RETURN_IF_ERROR(Need(n, field));
  offset_ += n;
  return Status::Ok();
}

Status ExpectMagicAndVersion(ByteReader& r, std::span<const uint8_t> magic, uint32_t version, const char* format) {
  std::span<const uint8_t> got;
  RETURN_IF_ERROR(r.Bytes(magic.size(), &got, "magic"));
  if (!std::equal(got.begin(), got.end(), magic.begin()))
    return Corrupt(FormatMessage("not a %s file (bad magic)", format));
  uint32_t got_version;
  RETURN_IF_ERROR(r.U32(&got_version, "format_version"));
  if (got_version != version) {
    return Unsupported(FormatMessage("format version %u not supported (this build reads %u)", got_version, version));
  }
  return Status::Ok();
}

}  // namespace kvc
