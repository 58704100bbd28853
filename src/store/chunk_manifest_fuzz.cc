// Fuzz target for the chunk manifest reader: anything it accepts re-serialises to the same bytes.
// Seeds: fuzz/corpus/chunk_manifest/ (written by store_test --gtest_also_run_disabled_tests
// --gtest_filter=ChunkManifestFuzzCorpus.DISABLED_Regenerate).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "store/chunk_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kvc::ReadChunkManifest({data, size});
  if (!m.ok()) {
    if (m.status().code() != kvc::StatusCode::kCorrupt && m.status().code() != kvc::StatusCode::kUnsupported) {
      (void)std::fprintf(stderr, "chunk_manifest_fuzz: unexpected status %s\n", m.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  const auto again = kvc::WriteChunkManifest(*m);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) {
    (void)std::fprintf(stderr, "chunk_manifest_fuzz: accepted bytes do not re-serialise identically\n");
    std::abort();
  }
  return 0;
}
