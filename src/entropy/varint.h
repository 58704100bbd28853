// LEB128 unsigned varints (7 bits a byte, least significant group first, high bit = more),
// shared by the entropy formats. Readers accept only the canonical (shortest) encoding, so
// every value has exactly one byte form and a parsed table re-serialises to the same bytes.
#pragma once

#include <cstdint>

#include "base/byte_io.h"

namespace kvc {

inline void PutVarint(ByteWriter* w, uint64_t v) {
  while (v >= 0x80) {
    w->U8(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  w->U8(static_cast<uint8_t>(v));
}

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Fails with kCorrupt on truncation, on a value above `max`, and on a non-canonical form
// (a trailing zero group, or bits beyond 64).
[[nodiscard]] inline Status ReadVarint(ByteReader* r, uint64_t max, uint64_t* out, const char* field) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    uint8_t b;
    RETURN_IF_ERROR(r->U8(&b, field));
    // The tenth byte carries bit 63 only and must end the varint.
    KVC_CHECK_CORRUPT(shift < 63 || b <= 1, "%s: varint overflows 64 bits", field);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      KVC_CHECK_CORRUPT(b != 0 || shift == 0, "%s: varint is not in its shortest form", field);
      break;
    }
  }
  KVC_CHECK_CORRUPT(v <= max, "%s: %llu exceeds the limit %llu", field, static_cast<unsigned long long>(v),
                    static_cast<unsigned long long>(max));
  *out = v;
  return Status::Ok();
}

}  // namespace kvc
