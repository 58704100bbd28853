// Raw DEFLATE (RFC 1951, no zlib/gzip wrapper) through libdeflate. The compressed size is
// stored by the caller, so decompression is told the exact output size and checks it.
// Each thread keeps its own libdeflate objects, allocated on first use: they cost hundreds
// of KiB to set up, far more than compressing a small block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace kvc {

inline constexpr int kMinDeflateLevel = 0;  // 0 stores, 1 is fastest
inline constexpr int kMaxDeflateLevel = 12;
inline constexpr int kDefaultDeflateLevel = 6;

// InvalidArgument for a level outside 0..12.
[[nodiscard]] Result<std::vector<uint8_t>> DeflateCompress(std::span<const uint8_t> in, int level);

// Fills `out` exactly. kCorrupt if the stream is malformed, decodes to more or fewer than
// out.size() bytes, or does not end exactly at the end of `in`.
[[nodiscard]] Status DeflateDecompress(std::span<const uint8_t> in, std::span<uint8_t> out);

}  // namespace kvc
