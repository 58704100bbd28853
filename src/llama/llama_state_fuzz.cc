// Fuzzes the llama.cpp sequence-state parser (it reads blobs that may come from files).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "llama/llama_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t heads = 1 + data[0] % 4;
  auto parsed = kvc::ParseLlamaSeqState(std::span(data + 1, size - 1), heads);
  if (parsed.ok()) {
    // Whatever parses must serialise again and parse back to the same cache.
    kvc::LlamaStateLayout layout;
    layout.dtype = parsed->dtype();
    auto blob = kvc::BuildLlamaSeqState(*parsed, layout);
    if (!blob.ok()) std::abort();
    auto again = kvc::ParseLlamaSeqState(*blob, heads);
    if (!again.ok() || !(*again == *parsed)) std::abort();
  }
  return 0;
}
