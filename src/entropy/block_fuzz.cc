// Fuzz target for DecodeBlock on arbitrary bytes, with a 1 MiB output cap. Whatever decodes
// must decode identically through DecodeBlockInto, and re-encode (with every method) to a
// block that decodes back to the same bytes without ever exceeding the stored size.
// Seeds: fuzz/corpus/entropy_block/, written by entropy_test --gtest_also_run_disabled_tests
// --gtest_filter=EntropyFuzzCorpus.DISABLED_Regenerate.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "entropy/block.h"

namespace {

constexpr size_t kMaxOutput = size_t{1} << 20;

void Check(bool ok, const char* what) {
  if (ok) return;
  (void)std::fprintf(stderr, "entropy_block_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto decoded = kvc::DecodeBlock(input, kMaxOutput);
  if (!decoded.ok()) {
    const kvc::StatusCode code = decoded.status().code();
    Check(code == kvc::StatusCode::kCorrupt || code == kvc::StatusCode::kUnsupported,
          "DecodeBlock failed with a code other than corrupt/unsupported");
    return 0;
  }
  Check(decoded->size() <= kMaxOutput, "decoded beyond the cap");

  std::vector<uint8_t> into(decoded->size());
  Check(kvc::DecodeBlockInto(input, into).ok(), "DecodeBlockInto rejected what DecodeBlock accepted");
  Check(into == *decoded, "DecodeBlockInto and DecodeBlock disagree");

  for (auto method : {kvc::EntropyMethod::kStored, kvc::EntropyMethod::kDeflate, kvc::EntropyMethod::kRans}) {
    auto block = kvc::EncodeBlock(*decoded, method, 1);
    Check(block.ok(), "EncodeBlock failed");
    Check(block->size() <= decoded->size() + kvc::kMaxBlockHeaderBytes, "EncodeBlock expanded the data");
    auto again = kvc::DecodeBlock(*block, decoded->size());
    Check(again.ok() && *again == *decoded, "re-encoded block does not round-trip");
  }
  return 0;
}
