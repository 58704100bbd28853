// The entropy-coded sections of a kvtc file (docs/format.md, kvtc): the quantiser's codes
// (section C: bit-packed, DEFLATE, or rANS with one table per code width over codes or over
// tuples of codes) and the size checks both sections get before anything is allocated for them.
// In the kvtc module rather than the codec so that calibration measures a rung's size on
// exactly the bytes the codec writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace kvc {

// kRansTuples codes k consecutive codes of a run as one symbol (k = 4 for 1-bit codes, 2 for
// 2-bit ones, 1 above): a quarter and a half of kRans's decode steps for those codes, which
// are the most numerous at high ratios. kRansTuplesWide is the same symbols in a wide rANS
// stream (32 interleaved states, rans.h), whose refills AVX2 does 8 states at a time: what the
// encoder writes. kRans and kRansTuples stay decodable (and encodable, for tests).
enum class KvtcCodesMethod : uint8_t { kPacked = 0, kDeflate = 1, kRans = 2, kRansTuples = 3, kRansTuplesWide = 4 };
inline constexpr KvtcCodesMethod kLastKvtcCodesMethod = KvtcCodesMethod::kRansTuplesWide;

// `count` consecutive codes of `bits` (1..8) bits each: a component's (or group's) tokens.
struct KvtcCodeRun {
  uint8_t bits = 0;
  size_t count = 0;
};

// Bits of all the codes the runs describe.
uint64_t TotalCodeBits(std::span<const KvtcCodeRun> runs);

// The codes, laid out run after run (their total count is codes.size()). The section is a
// method byte and its payload; `method` is tried and kept when smaller than plain bit-packing.
// InvalidArgument if the runs do not cover the codes or a code does not fit its width.
[[nodiscard]] Result<std::vector<uint8_t>> EncodeKvtcCodes(std::span<const uint8_t> codes,
                                                           std::span<const KvtcCodeRun> runs, KvtcCodesMethod method);

// Checks a code section against the codes' total width before it is decoded: a packed payload
// must be exactly the packed size, a DEFLATE one able to hold it.
[[nodiscard]] Status CheckKvtcCodesSection(std::span<const uint8_t> section, uint64_t total_bits);

// Decodes a code section into codes (laid out as the runs say); kCorrupt on any inconsistency.
[[nodiscard]] Status DecodeKvtcCodes(std::span<const uint8_t> section, std::span<const KvtcCodeRun> runs,
                                     std::span<uint8_t> codes);

// The S section is an entropy block (docs/format.md, "Entropy block") that must declare exactly
// `expected` bytes; a stored block must hold them, a DEFLATE one be able to.
[[nodiscard]] Status CheckKvtcScaleBlock(std::span<const uint8_t> block, uint64_t expected);

}  // namespace kvc
