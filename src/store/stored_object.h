// The envelope around every object a kvcodec store holds (docs/format.md, "Stored objects").
//
// A store maps names to bytes, and anyone who can write to it can put any bytes under any name:
// a valid chunk of another prompt copied to this chunk's name would decode fine and silently
// change the generated text. So each object carries the name it was written under, and a reader
// accepts it only under that name. The name already says the chunk key, codec and level (or
// ".manifest"), so this binds an object to its place. The seal over the whole envelope is a
// CRC32C (catches damage, not malice), or, when the store has a secret, an HMAC-SHA256 keyed with
// it: then a writer without the secret can neither forge an object nor move one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

inline constexpr uint32_t kStoredObjectVersion = 1;

// How an envelope is sealed; the u32 "seal" field.
enum class ObjectSeal : uint32_t {
  kCrc32c = 1,      // 4-byte CRC32C: integrity only
  kHmacSha256 = 2,  // 32-byte HMAC-SHA256 keyed with the store's secret: integrity and origin
};

// The bytes to store under `name`: `payload` in an envelope naming it, sealed with CRC32C when
// `secret` is empty, else with HMAC-SHA256 keyed with `secret`. kInvalidArgument for a name
// CheckObjectName rejects.
Result<std::vector<uint8_t>> SealStoredObject(std::string_view name, std::span<const uint8_t> payload,
                                              std::string_view secret);

// The payload of `object` read under `name` (a view into `object`), checked against `secret`
// (empty: the store has none). `object` is hostile: every failure is kCorrupt with one line
// naming the object and what is wrong: not an envelope (bad magic: e.g. written by an older
// kvcodec), another version, truncated, trailing bytes, a CRC32C mismatch, a seal the secret
// does not match (HMAC mismatch, a CRC-only object under a secret, an HMAC'd object without
// one), or a name other than `name`.
Result<std::span<const uint8_t>> OpenStoredObject(std::string_view name, std::span<const uint8_t> object,
                                                  std::string_view secret);

// Envelope bytes around a payload stored under `name` with `seal`: object size - payload size.
size_t StoredObjectOverhead(std::string_view name, ObjectSeal seal);

}  // namespace kvc
