// Fuzzes the whole-state parser (a state may come from a file or a store).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "llama/seq_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = kvc::ParseSeqState(std::span(data, size));
  if (parsed.ok()) {
    // Whatever parses writes back and parses to the same state.
    auto blob = kvc::WriteSeqState(*parsed);
    if (!blob.ok()) std::abort();
    auto again = kvc::ParseSeqState(*blob);
    if (!again.ok() || !(*again == *parsed)) std::abort();
  }
  return 0;
}
