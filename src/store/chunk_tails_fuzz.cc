// Fuzz target for the chunk tails list reader: anything it accepts re-serialises to the same bytes.
// Seeds: fuzz/corpus/chunk_tails/ (written by store_test --gtest_also_run_disabled_tests
// --gtest_filter=ChunkTailsFuzzCorpus.DISABLED_Regenerate).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "store/chunk_tails.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto list = kvc::ReadChunkTails({data, size});
  if (!list.ok()) {
    if (list.status().code() != kvc::StatusCode::kCorrupt && list.status().code() != kvc::StatusCode::kUnsupported) {
      (void)std::fprintf(stderr, "chunk_tails_fuzz: unexpected status %s\n", list.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  if (size > kvc::MaxChunkTailsBytes(list->chunk_tokens)) {
    (void)std::fprintf(stderr, "chunk_tails_fuzz: accepted a list larger than its bound\n");
    std::abort();
  }
  const auto again = kvc::WriteChunkTails(*list);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) {
    (void)std::fprintf(stderr, "chunk_tails_fuzz: accepted bytes do not re-serialise identically\n");
    std::abort();
  }
  return 0;
}
