// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum on every kvcodec header
// and section. The CPU's crc32 instruction where it has one (SSE4.2), else portable C++
// (slicing-by-8); identical results on every machine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvc {

// CRC32C of n bytes. Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const void* data, size_t n);

// Continues a CRC: Crc32cExtend(Crc32c(a), b) == Crc32c(a || b). Crc32cExtend(0, ...) ==
// Crc32c(...), so a running checksum may start from 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// The portable loop alone, for tests that compare it with the dispatched one.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace kvc
