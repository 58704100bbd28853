// The pieces the codec fuzz targets' direct-decode inputs share (codecs_fuzz.cc, kvtc_fuzz.cc),
// read by the targets and written by the tests that make their seeds, so the two sides cannot
// drift apart: the sections of a KvcFile (u8 count, then per section u32 tag, u32 length,
// bytes; little-endian), and the check that whatever a decoder accepts matches its header.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/byte_io.h"
#include "format/container.h"
#include "tensor/kv_cache.h"

namespace kvc {

void WriteFuzzSections(ByteWriter& w, std::span<const KvcSection> sections);

// False on a short input or more than `max_sections` sections.
bool ReadFuzzSections(ByteReader& r, uint8_t max_sections, std::vector<KvcSectionView>* out);

// Null when `cache` has the header's shape, dtype and first position and buffers of that size,
// else what differs. Reads every byte, so a sanitizer sees a buffer shorter than its shape says.
const char* DecodedMismatch(const KvCache& cache, const KvcHeader& header);

}  // namespace kvc
