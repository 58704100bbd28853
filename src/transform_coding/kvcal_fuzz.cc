// Fuzz target for ReadKvcal. Any input must either fail cleanly or parse into a calibration
// that passes ValidateCalibration and that WriteKvcal turns back into exactly the input bytes
// (the format is canonical, which is what lets KvcalHash name a calibration).
//
// Almost every mutation breaks a CRC, which would keep the fuzzer in front of the checksums;
// so each input is also tried with its CRCs recomputed, which lets mutations reach the field
// and value checks behind them.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "base/crc32c.h"
#include "transform_coding/kvcal.h"

namespace {

void Fail(const char* what, const kvc::Status& status = kvc::Status::Ok()) {
  (void)std::fprintf(stderr, "kvcal_fuzz: %s%s%s\n", what, status.ok() ? "" : ": ",
                     status.ok() ? "" : status.ToString().c_str());
  std::abort();
}

uint64_t GetLe(const std::vector<uint8_t>& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

void PutU32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the header CRC and every section CRC whose section lies within the input, walking
// the stored lengths (offsets: docs/format.md, .kvcal).
std::vector<uint8_t> WithCrcsFixed(std::span<const uint8_t> input) {
  std::vector<uint8_t> b(input.begin(), input.end());
  if (b.size() < 12) return b;
  // The header body is 63 bytes in version 1, 68 in version 2 and 69 in version 3; any other
  // length is refused before a CRC is looked at.
  const uint64_t header_length = GetLe(b, 8, 4);
  if (header_length != 63 && header_length != 68 && header_length != 69) return b;
  const size_t header_crc_at = 12 + static_cast<size_t>(header_length);
  if (b.size() < header_crc_at + 4) return b;
  PutU32(b, header_crc_at, kvc::Crc32c(b.data(), header_crc_at));
  for (size_t at = header_crc_at + 4; b.size() - at >= 16;) {
    const uint64_t length = GetLe(b, at + 4, 8);
    if (length > b.size() - at - 16) break;
    PutU32(b, at + 12,
           kvc::Crc32cExtend(kvc::Crc32c(b.data() + at, 12), b.data() + at + 16, static_cast<size_t>(length)));
    at += 16 + static_cast<size_t>(length);
  }
  return b;
}

void Check(std::span<const uint8_t> input) {
  auto calibration = kvc::ReadKvcal(input);
  if (!calibration.ok()) {
    // A damaged file is kCorrupt and an unknown version kUnsupported; anything else means the
    // reader mislabels hostile input.
    const kvc::StatusCode code = calibration.status().code();
    if (code != kvc::StatusCode::kCorrupt && code != kvc::StatusCode::kUnsupported) {
      Fail("unexpected status code", calibration.status());
    }
    return;
  }
  if (kvc::Status s = kvc::ValidateCalibration(*calibration); !s.ok()) {
    Fail("ReadKvcal accepted an invalid calibration", s);
  }

  auto rewritten = kvc::WriteKvcal(*calibration);
  if (!rewritten.ok()) Fail("WriteKvcal rejected what ReadKvcal accepted", rewritten.status());
  if (*rewritten != std::vector<uint8_t>(input.begin(), input.end())) {
    Fail("rewrite differs from the input bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  Check(input);
  const std::vector<uint8_t> fixed = WithCrcsFixed(input);
  if (!std::equal(fixed.begin(), fixed.end(), input.begin(), input.end())) Check(fixed);
  return 0;
}
