#include "base/utf8.h"

#include <cstdint>
#include <cstdio>

namespace kvc {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Scan { kValid, kInvalid, kIncomplete };

// Looks at the sequence starting at p[0]. kValid: *len bytes form one character. kInvalid: the
// first *len bytes (the maximal ill-formed subpart, >= 1) can never be part of a character.
// kIncomplete: all n bytes are a valid start, and more are needed.
Scan ScanOne(const uint8_t* p, size_t n, size_t* len) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return Scan::kValid;
  }
  size_t need;                   // continuation bytes after b0
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the first continuation byte (the others: 80..BF)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *len = 1;
    return Scan::kInvalid;
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= n) {
      *len = n;
      return Scan::kIncomplete;
    }
    const uint8_t b = p[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *len = i;
      return Scan::kInvalid;
    }
  }
  *len = need + 1;
  return Scan::kValid;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 0;
    if (ScanOne(p + i, text.size() - i, &len) != Scan::kValid) return false;
    i += len;
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes) {
  Utf8Stream stream;
  std::string out = stream.Push(bytes);
  out += stream.Finish();
  return out;
}

std::string Utf8Stream::Push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  out.reserve(pending_.size());
  const auto* p = reinterpret_cast<const uint8_t*>(pending_.data());
  size_t i = 0;
  while (i < pending_.size()) {
    size_t len = 0;
    const Scan scan = ScanOne(p + i, pending_.size() - i, &len);
    if (scan == Scan::kIncomplete) break;
    if (scan == Scan::kValid) {
      out.append(pending_, i, len);
    } else {
      out.append(kReplacement);
    }
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::Finish() {
  // What is left is one incomplete character: one maximal ill-formed subpart.
  const bool incomplete = !pending_.empty();
  pending_.clear();
  return incomplete ? std::string(kReplacement) : std::string();
}

std::string PrintableOneLine(std::string_view text) {
  const std::string valid = ToValidUtf8(text);
  std::string out;
  out.reserve(valid.size());
  const auto* p = reinterpret_cast<const uint8_t*>(valid.data());
  for (size_t i = 0; i < valid.size(); ++i) {
    const uint8_t b = p[i];
    // C1 controls are U+0080..U+009F, encoded C2 80..C2 9F.
    const bool c1 = b == 0xC2 && i + 1 < valid.size() && p[i + 1] >= 0x80 && p[i + 1] <= 0x9F;
    if (b < 0x20 || b == 0x7F || c1) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c1 ? p[i + 1] : b);
      out += buf;
      if (c1) ++i;
    } else {
      out += static_cast<char>(b);
    }
  }
  return out;
}

}  // namespace kvc
