// Fuzz target for the stored-object envelope reader: hostile bytes read under a fixed name, with
// and without a secret, must give a payload or kCorrupt (never a crash, never another code), and
// what is accepted must seal back to the same bytes. A second pass re-seals the input's own
// CRC32C, so that mutations get past the checksum into the fields behind it.
// Seeds: fuzz/corpus/stored_object/ (written by store_test --gtest_also_run_disabled_tests
// --gtest_filter=StoredObjectFuzzCorpus.DISABLED_Regenerate).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "base/crc32c.h"
#include "store/stored_object.h"

namespace {

constexpr std::string_view kFuzzName = "00112233445566778899aabbccddeeff.kvtc.16";
constexpr std::string_view kFuzzSecret = "kvcodec-fuzz-secret";

void Check(std::span<const uint8_t> object, std::string_view secret) {
  const auto payload = kvc::OpenStoredObject(kFuzzName, object, secret);
  if (!payload.ok()) {
    if (payload.status().code() != kvc::StatusCode::kCorrupt) {
      (void)std::fprintf(stderr, "stored_object_fuzz: unexpected status %s\n", payload.status().ToString().c_str());
      std::abort();
    }
    return;
  }
  if (payload->data() < object.data() || payload->data() + payload->size() > object.data() + object.size()) {
    (void)std::fprintf(stderr, "stored_object_fuzz: payload outside the object\n");
    std::abort();
  }
  const auto again = kvc::SealStoredObject(kFuzzName, *payload, secret);
  if (!again.ok() || again->size() != object.size() || !std::equal(again->begin(), again->end(), object.begin())) {
    (void)std::fprintf(stderr, "stored_object_fuzz: accepted bytes do not re-seal identically\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  Check(input, "");
  Check(input, kFuzzSecret);
  if (size >= 4) {
    std::vector<uint8_t> resealed(data, data + size);
    const uint32_t crc = kvc::Crc32c(data, size - 4);
    for (int i = 0; i < 4; ++i) resealed[size - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
    Check(resealed, "");
  }
  return 0;
}
