// HMAC-SHA256 (RFC 2104 over FIPS 180-4 SHA-256) for authenticated stored objects
// (stored_object.h). The MAC is OpenSSL's libcrypto: a keyed MAC is not something to hand-roll.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"

namespace kvc {

inline constexpr size_t kHmacSha256Bytes = 32;
using HmacSha256Tag = std::array<uint8_t, kHmacSha256Bytes>;

// HMAC-SHA256 of `message` keyed with `key` (any length, empty included). kInternal only when
// libcrypto itself fails.
Result<HmacSha256Tag> HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// a == b, in time that depends on the lengths only, never on where the bytes differ: comparing
// MACs with memcmp would tell a forger how many leading bytes of a guess were right.
bool EqualInConstantTime(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace kvc
