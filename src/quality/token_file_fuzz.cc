// Fuzzes the --token-file parser: the file is whatever the user's tokeniser (or a stray file)
// produced.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "quality/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t n_vocab = 1 + data[0] * 257u;
  auto r = kvc::ParseTokenDocuments(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), n_vocab);
  if (r.ok()) {
    // Accepted means: at least one non-empty document, every id in the vocabulary, and no more
    // ids than the input has digits.
    if (r->empty()) std::abort();
    size_t ids = 0;
    for (const auto& doc : *r) {
      if (doc.empty()) std::abort();
      for (int32_t id : doc) {
        if (id < 0 || static_cast<uint32_t>(id) >= n_vocab) std::abort();
      }
      ids += doc.size();
    }
    if (ids > size) std::abort();
  } else if (r.status().code() != kvc::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
