#include "kvtc/code_stream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kvc {
namespace {

struct Codes {
  std::vector<uint8_t> codes;
  std::vector<KvtcCodeRun> runs;
};

// Runs of every width 1..8 (and some empty ones); `peaked` draws codes near the middle level,
// as a component quantiser's are, otherwise uniformly.
Codes MakeCodes(bool peaked, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Codes c;
  for (int round = 0; round < 3; ++round) {
    for (uint8_t bits = 1; bits <= 8; ++bits) {
      const size_t count = round == 1 && bits % 3 == 0 ? 0 : 1 + rng() % 4000;
      c.runs.push_back({bits, count});
      std::normal_distribution<double> normal(0.0, std::max(1.0, (1 << bits) / 8.0));
      for (size_t i = 0; i < count; ++i) {
        const int top = (1 << bits) - 1;
        int code = peaked ? static_cast<int>(std::lround((1 << (bits - 1)) + normal(rng))) : static_cast<int>(rng() % (top + 1));
        c.codes.push_back(static_cast<uint8_t>(std::clamp(code, 0, top)));
      }
    }
  }
  return c;
}

uint64_t TotalBits(const std::vector<KvtcCodeRun>& runs) {
  uint64_t bits = 0;
  for (const KvtcCodeRun& r : runs) bits += uint64_t{r.bits} * r.count;
  return bits;
}

TEST(KvtcCodeStream, EveryMethodRoundTrips) {
  for (bool peaked : {true, false}) {
    const Codes c = MakeCodes(peaked, peaked ? 1 : 2);
    for (KvtcCodesMethod method : {KvtcCodesMethod::kPacked, KvtcCodesMethod::kDeflate, KvtcCodesMethod::kRans}) {
      auto section = EncodeKvtcCodes(c.codes, c.runs, method);
      ASSERT_TRUE(section.ok()) << section.status().ToString();
      ASSERT_TRUE(CheckKvtcCodesSection(*section, TotalBits(c.runs)).ok());
      std::vector<uint8_t> back(c.codes.size());
      const Status st = DecodeKvtcCodes(*section, c.runs, back);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(back, c.codes) << "method " << int(method) << (peaked ? " peaked" : " uniform");
    }
  }
}

TEST(KvtcCodeStream, KeepsTheMethodOnlyWhenItIsSmallerThanPacking) {
  const uint64_t packed_bytes = 1 + (TotalBits(MakeCodes(true, 1).runs) + 7) / 8;
  // Peaked codes (spread like a component quantiser's at its Gaussian step): rANS is smaller.
  const Codes peaked = MakeCodes(true, 1);
  auto rans = EncodeKvtcCodes(peaked.codes, peaked.runs, KvtcCodesMethod::kRans);
  ASSERT_TRUE(rans.ok());
  EXPECT_EQ((*rans)[0], static_cast<uint8_t>(KvtcCodesMethod::kRans));
  EXPECT_LT(rans->size(), packed_bytes * 0.9);
  // Uniform codes: nothing beats packing, which is what is written.
  const Codes uniform = MakeCodes(false, 2);
  for (KvtcCodesMethod method : {KvtcCodesMethod::kDeflate, KvtcCodesMethod::kRans}) {
    auto section = EncodeKvtcCodes(uniform.codes, uniform.runs, method);
    ASSERT_TRUE(section.ok());
    EXPECT_EQ((*section)[0], static_cast<uint8_t>(KvtcCodesMethod::kPacked)) << int(method);
    EXPECT_EQ(section->size(), 1 + (TotalBits(uniform.runs) + 7) / 8);
  }
}

TEST(KvtcCodeStream, EncoderRejectsCodesTheRunsDoNotDescribe) {
  const std::vector<uint8_t> codes = {1, 0, 3};
  using Runs = std::vector<KvtcCodeRun>;
  EXPECT_TRUE(EncodeKvtcCodes(codes, Runs{{1, 2}, {2, 1}}, KvtcCodesMethod::kRans).ok());
  EXPECT_EQ(EncodeKvtcCodes(codes, Runs{{1, 2}}, KvtcCodesMethod::kRans).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeKvtcCodes(codes, Runs{{1, 3}}, KvtcCodesMethod::kRans).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeKvtcCodes(codes, Runs{{0, 1}, {2, 2}}, KvtcCodesMethod::kPacked).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeKvtcCodes(codes, Runs{{9, 3}}, KvtcCodesMethod::kPacked).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KvtcCodeStream, HostileSectionsAreRejectedWithoutCrashing) {
  const Codes c = MakeCodes(true, 3);
  std::vector<uint8_t> back(c.codes.size());
  for (KvtcCodesMethod method : {KvtcCodesMethod::kPacked, KvtcCodesMethod::kDeflate, KvtcCodesMethod::kRans}) {
    auto section = EncodeKvtcCodes(c.codes, c.runs, method);
    ASSERT_TRUE(section.ok());
    // Runs that do not match the output are the caller's error, not the file's.
    EXPECT_EQ(DecodeKvtcCodes(*section, std::vector<KvtcCodeRun>{{2, 5}}, back).code(), StatusCode::kInvalidArgument);
    // Every truncation fails.
    for (size_t keep = 0; keep < section->size(); keep += 1 + section->size() / 64) {
      std::vector<uint8_t> cut(section->begin(), section->begin() + keep);
      EXPECT_FALSE(DecodeKvtcCodes(cut, c.runs, back).ok()) << "method " << int(method) << " cut to " << keep;
    }
    // Byte flips never read out of bounds (ASan checks); most are caught.
    std::mt19937_64 rng(static_cast<uint64_t>(method));
    for (int i = 0; i < 200; ++i) {
      std::vector<uint8_t> bad = *section;
      bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      (void)DecodeKvtcCodes(bad, c.runs, back);
    }
  }
  std::vector<uint8_t> unknown = {7, 0, 0};
  EXPECT_EQ(DecodeKvtcCodes(unknown, c.runs, back).code(), StatusCode::kCorrupt);
  // A rANS section without a table for a width the runs use.
  const std::vector<uint8_t> codes = {1, 2, 3, 0};
  auto section = EncodeKvtcCodes(codes, std::vector<KvtcCodeRun>{{2, 4}}, KvtcCodesMethod::kRans);
  ASSERT_TRUE(section.ok());
  std::vector<uint8_t> four(4);
  if ((*section)[0] == static_cast<uint8_t>(KvtcCodesMethod::kRans)) {
    EXPECT_EQ(DecodeKvtcCodes(*section, std::vector<KvtcCodeRun>{{3, 4}}, four).code(), StatusCode::kCorrupt);
  }
}

}  // namespace
}  // namespace kvc
