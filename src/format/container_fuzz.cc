// Fuzz target for ReadKvc. Any input must either fail cleanly or parse into a file that
// WriteKvc reproduces byte for byte (the layout is canonical) and that reads back the same.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "format/container.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "container_fuzz: %s\n", what);
  std::abort();
}

bool SameHeader(const kvc::KvcHeader& a, const kvc::KvcHeader& b) {
  return a.codec_id == b.codec_id && a.codec_version == b.codec_version && a.level == b.level &&
         a.codec_params == b.codec_params && a.shape == b.shape && a.dtype == b.dtype &&
         a.model_fingerprint == b.model_fingerprint && a.token_begin == b.token_begin && a.pos_begin == b.pos_begin;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto file = kvc::ReadKvc(input);
  if (!file.ok()) return 0;

  // Reading every byte lets ASan catch a span that points outside the input.
  uint32_t sum = 0;
  std::vector<kvc::KvcSection> sections;
  sections.reserve(file->sections.size());
  for (const kvc::KvcSectionView& view : file->sections) {
    for (uint8_t b : view.bytes) sum += b;
    sections.push_back({view.tag, {view.bytes.begin(), view.bytes.end()}});
  }
  volatile uint32_t sink = sum;
  (void)sink;

  auto rewritten = kvc::WriteKvc(file->header, sections);
  if (!rewritten.ok()) Fail("WriteKvc rejected a header ReadKvc accepted");
  if (*rewritten != std::vector<uint8_t>(input.begin(), input.end())) Fail("rewrite differs from the input bytes");

  auto reread = kvc::ReadKvc(*rewritten);
  if (!reread.ok()) Fail("ReadKvc rejected WriteKvc's output");
  if (!SameHeader(reread->header, file->header)) Fail("header changed across rewrite");
  if (reread->sections.size() != sections.size()) Fail("section count changed across rewrite");
  for (size_t i = 0; i < sections.size(); ++i) {
    const auto& got = reread->sections[i];
    if (got.tag != sections[i].tag ||
        !std::equal(got.bytes.begin(), got.bytes.end(), sections[i].bytes.begin(), sections[i].bytes.end())) {
      Fail("section changed across rewrite");
    }
  }
  return 0;
}
