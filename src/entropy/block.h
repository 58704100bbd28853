// The block coder codecs call on a byte buffer: a small self-describing block that says which
// entropy method was used and how many bytes it decodes to, so a decoder needs nothing else.
// Encoding never expands data beyond the stored form (1 + varint(size) + size bytes): when
// the preferred method does not shrink the data, the block is stored. Output is deterministic
// (the same input and arguments give the same bytes). There is no checksum: the container's
// section CRC covers the block. Byte layout: docs/format.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "entropy/deflate.h"

namespace kvc {

enum class EntropyMethod : uint8_t {
  kStored = 0,   // the bytes as they are
  kDeflate = 1,  // raw DEFLATE (libdeflate)
  kRans = 2,     // order-0 rANS over bytes with a table stored in the block
};

// The largest header a block can have: method byte plus a 10-byte varint.
inline constexpr size_t kMaxBlockHeaderBytes = 11;

// `deflate_level` (0..12) applies to kDeflate only; InvalidArgument if it is out of range or
// `preferred` is not a known method.
[[nodiscard]] Result<std::vector<uint8_t>> EncodeBlock(std::span<const uint8_t> data, EntropyMethod preferred,
                                                       int deflate_level = kDefaultDeflateLevel);

// Hostile input. The declared size is checked against max_output_bytes before anything is
// allocated. kCorrupt for a malformed, truncated or over-long block, kUnsupported for a method
// byte this build does not know.
[[nodiscard]] Result<std::vector<uint8_t>> DecodeBlock(std::span<const uint8_t> block, size_t max_output_bytes);

// For callers that know the decoded size: kCorrupt unless the block declares exactly
// out.size() bytes and decodes into them.
[[nodiscard]] Status DecodeBlockInto(std::span<const uint8_t> block, std::span<uint8_t> out);

// The method a block says it used, without decoding it (kCorrupt if empty, kUnsupported if
// unknown).
[[nodiscard]] Result<EntropyMethod> BlockMethod(std::span<const uint8_t> block);

}  // namespace kvc
