#include "codecs/fuzz_input.h"

namespace kvc {

void WriteFuzzSections(ByteWriter& w, std::span<const KvcSection> sections) {
  w.U8(static_cast<uint8_t>(sections.size()));
  for (const KvcSection& s : sections) {
    w.U32(s.tag);
    w.U32(static_cast<uint32_t>(s.bytes.size()));
    w.Bytes(s.bytes);
  }
}

bool ReadFuzzSections(ByteReader& r, uint8_t max_sections, std::vector<KvcSectionView>* out) {
  uint8_t n_sections;
  if (!r.U8(&n_sections, "section count").ok() || n_sections > max_sections) return false;
  out->clear();
  for (uint8_t i = 0; i < n_sections; ++i) {
    KvcSectionView section;
    uint32_t length;
    if (!r.U32(&section.tag, "tag").ok() || !r.U32(&length, "length").ok() ||
        !r.Bytes(length, &section.bytes, "section").ok()) {
      return false;
    }
    out->push_back(section);
  }
  return true;
}

const char* DecodedMismatch(const KvCache& cache, const KvcHeader& header) {
  if (cache.shape() != header.shape) return "decoded shape differs from the header's";
  if (cache.dtype() != header.dtype) return "decoded dtype differs from the header's";
  if (cache.pos_begin() != header.pos_begin) return "decoded pos_begin differs from the header's";
  uint32_t sum = 0;
  for (KvKind kind : kKvKinds) {
    const size_t want =
        kind == KvKind::kValue && header.shape.keys_only ? 0 : header.shape.elems() * DTypeSize(header.dtype);
    if (cache.Bytes(kind).size() != want) {
      return "decoded buffer size is wrong";
    }
    for (uint8_t b : cache.Bytes(kind)) sum += b;
  }
  volatile uint32_t sink = sum;
  (void)sink;
  return nullptr;
}

}  // namespace kvc
