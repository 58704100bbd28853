// Little-endian byte writing and hostile-input byte reading. Every binary format in kvcodec
// is written through ByteWriter and parsed through ByteReader, so bounds are checked in one
// place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

class ByteWriter {
 public:
  void U8(uint8_t v) { bytes_.push_back(v); }
  void U16(uint16_t v) { PutLe(v, 2); }
  void U32(uint32_t v) { PutLe(v, 4); }
  void U64(uint64_t v) { PutLe(v, 8); }
  void I32(int32_t v) { PutLe(static_cast<uint32_t>(v), 4); }
  void F32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    U32(bits);
  }
  void Bytes(std::span<const uint8_t> data) { bytes_.insert(bytes_.end(), data.begin(), data.end()); }
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }
  // u32 length, then the bytes.
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  // Overwrites 4 bytes at `offset` (for lengths known only after the body is written).
  void PatchU32(size_t offset, uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_[offset + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  void PatchU64(size_t offset, uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_[offset + i] = static_cast<uint8_t>(v >> (8 * i));
  }

  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  void PutLe(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> bytes_;
};

// Reads from a span it does not own. Every read names the field, so a truncated input fails
// with "truncated reading <field> at offset N (need K bytes, have M)".
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> data) : data_(data) {}

  Status U8(uint8_t* out, const char* field);
  Status U16(uint16_t* out, const char* field);
  Status U32(uint32_t* out, const char* field);
  Status U64(uint64_t* out, const char* field);
  Status I32(int32_t* out, const char* field);
  Status F32(float* out, const char* field);
  // A view of the next n bytes (no copy).
  Status Bytes(size_t n, std::span<const uint8_t>* out, const char* field);
  // u32 length then bytes; the length is checked against `max_len` and the data left.
  Status String(std::string* out, size_t max_len, const char* field);
  Status Skip(size_t n, const char* field);

  size_t offset() const { return offset_; }
  size_t remaining() const { return data_.size() - offset_; }
  bool empty() const { return remaining() == 0; }

 private:
  Status Need(size_t n, const char* field) const;
  uint64_t GetLe(int n);

  std::span<const uint8_t> data_;
  size_t offset_ = 0;
};

// Reads a format's magic and u32 version: kCorrupt "not a <format> file (bad magic)" or
// kUnsupported "format version N not supported (this build reads V)".
Status ExpectMagicAndVersion(ByteReader& r, std::span<const uint8_t> magic, uint32_t version, const char* format);

}  // namespace kvc
