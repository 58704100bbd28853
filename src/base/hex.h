// Hexadecimal digits in text (fingerprints, hashes, percent-encoded URLs).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kvc {

// The value of one hex digit, either case; -1 for any other character.
inline int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `hex`, two digits a byte (either case), into `out`; false, with `out` unspecified, when `hex`
// is not exactly 2 * out.size() hex digits.
inline bool ParseHexBytes(std::string_view hex, std::span<uint8_t> out) {
  if (hex.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexDigitValue(hex[2 * i]), lo = HexDigitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

}  // namespace kvc
