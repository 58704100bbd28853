// Fuzzes the quality-profile reader: the file sits beside the model, where anyone who can write
// there can put anything.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "reuse/model_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto p = kvc::ParseProfile(text);
  if (p.ok()) {
    // What is accepted writes back to text that parses to the same rungs.
    auto again = kvc::ParseProfile(kvc::WriteProfile(*p));
    if (!again.ok() || again->rungs.size() != p->rungs.size()) std::abort();
    kvc::QualityFloor floor = kvc::FloorFromProfile(*p, {}, p->calibration);
    if (floor.allowed.empty()) std::abort();  // raw is always allowed
  } else if (p.status().code() != kvc::StatusCode::kCorrupt && p.status().code() != kvc::StatusCode::kUnsupported) {
    std::abort();
  }
  return 0;
}
