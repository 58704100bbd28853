// Fuzzes the slot record reader: records come back from a store, which may hold anything.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "serve/slot_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = kvc::ParseSlotRecord(std::span(data, size));
  if (r.ok()) {
    // What is accepted re-serializes to the same bytes and holds no negative id.
    if (kvc::SerializeSlotRecord(*r) != std::vector<uint8_t>(data, data + size)) std::abort();
    for (const int32_t t : r->tokens) {
      if (t < 0) std::abort();
    }
  }
  return 0;
}
