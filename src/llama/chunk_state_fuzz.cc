// Fuzzes the stored state chunk readers (objects from a store are hostile): the first two bytes
// split the input into a token object and a boundary object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "llama/chunk_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t split = std::min<size_t>(size - 2, size_t{data[0]} << 8 | data[1]);
  const std::span<const uint8_t> tokens(data + 2, split), boundary(data + 2 + split, size - 2 - split);
  auto chunk = kvc::ReadChunkTokens(tokens);
  if (!chunk.ok()) return 0;
  if (kvc::HasBoundary(*chunk) && !kvc::ReadChunkBoundary(boundary, &*chunk).ok()) return 0;
  // What reads writes back and reads to the same chunk, and a prefix of it composes.
  auto written = kvc::WriteChunkTokens(*chunk);
  if (!written.ok()) std::abort();
  auto again = kvc::ReadChunkTokens(*written);
  if (!again.ok() || again->tokens != chunk->tokens || again->at_boundary != chunk->at_boundary) std::abort();
  if (!kvc::ComposePrefixState(std::span(&*chunk, 1)).ok()) std::abort();
  return 0;
}
