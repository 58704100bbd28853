#include "transform_coding/code_stream.h"

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
        int code = peaked ? static_cast<int>(std::lround((1 << (bits - 1)) + normal(rng)))
                          : static_cast<int>(rng() % (top + 1));
        c.codes.push_back(static_cast<uint8_t>(std::clamp(code, 0, top)));
      }
    }
  }
  return c;
}

constexpr KvtcCodesMethod kMethods[] = {KvtcCodesMethod::kPacked, KvtcCodesMethod::kDeflate, KvtcCodesMethod::kRans,
                                        KvtcCodesMethod::kRansTuples, KvtcCodesMethod::kRansTuplesWide};

uint64_t TotalBits(const std::vector<KvtcCodeRun>& runs) {
  uint64_t bits = 0;
  for (const KvtcCodeRun& r : runs) bits += uint64_t{r.bits} * r.count;
  return bits;
}

TEST(KvtcCodeStream, EveryMethodRoundTrips) {
  for (bool peaked : {true, false}) {
    const Codes c = MakeCodes(peaked, peaked ? 1 : 2);
    for (KvtcCodesMethod method : kMethods) {
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
  for (KvtcCodesMethod method : {KvtcCodesMethod::kDeflate, KvtcCodesMethod::kRans, KvtcCodesMethod::kRansTuples,
                                 KvtcCodesMethod::kRansTuplesWide}) {
    auto section = EncodeKvtcCodes(uniform.codes, uniform.runs, method);
    ASSERT_TRUE(section.ok());
    EXPECT_EQ((*section)[0], static_cast<uint8_t>(KvtcCodesMethod::kPacked)) << int(method);
    EXPECT_EQ(section->size(), 1 + (TotalBits(uniform.runs) + 7) / 8);
  }
}

TEST(KvtcCodeStream, TuplesCoverRunsOfEveryLength) {
  // Runs of 1..9 one- and two-bit codes: every remainder of a 4- or 2-code tuple.
  std::mt19937_64 rng(5);
  Codes c;
  for (size_t count = 1; count <= 9; ++count) {
    for (uint8_t bits : {1, 2, 3}) {
      c.runs.push_back({bits, count});
      for (size_t i = 0; i < count; ++i)
        c.codes.push_back(static_cast<uint8_t>(rng() % 3 == 0 ? rng() % (1u << bits) : 0));
    }
  }
  // Neighbouring runs of one width, whole and partial tuples: the decoder joins those that
  // end on a tuple boundary.
  for (auto [bits, count] : {std::pair{1, 8}, {1, 5}, {1, 4}, {1, 3}, {2, 6}, {2, 3}, {2, 2}, {2, 4}, {3, 7}, {3, 2}}) {
    c.runs.push_back({static_cast<uint8_t>(bits), static_cast<size_t>(count)});
    for (int i = 0; i < count; ++i) c.codes.push_back(static_cast<uint8_t>(rng() % (1u << bits)));
  }
  // Long peaked runs as well, so that rANS beats packing and the tuple path is what decodes.
  const Codes peaked = MakeCodes(true, 4);
  c.codes.insert(c.codes.end(), peaked.codes.begin(), peaked.codes.end());
  c.runs.insert(c.runs.end(), peaked.runs.begin(), peaked.runs.end());
  for (KvtcCodesMethod method : {KvtcCodesMethod::kRansTuples, KvtcCodesMethod::kRansTuplesWide}) {
    auto tuples = EncodeKvtcCodes(c.codes, c.runs, method);
    ASSERT_TRUE(tuples.ok()) << tuples.status().ToString();
    ASSERT_EQ((*tuples)[0], static_cast<uint8_t>(method));
    std::vector<uint8_t> back(c.codes.size());
    ASSERT_TRUE(DecodeKvtcCodes(*tuples, c.runs, back).ok());
    EXPECT_EQ(back, c.codes) << int(method);
  }
}

TEST(KvtcCodeStream, ATupleWithNonZeroPaddingIsCorrupt) {
  // Eight 1-bit ones as two 4-code tuples (0b1111 each); read back as runs of 5 and 3, the
  // first run's second tuple carries three padding codes of 1.
  std::vector<uint8_t> codes(8, 1);
  // Enough copies that rANS beats bit-packing (a constant run codes in almost nothing).
  std::vector<KvtcCodeRun> runs(1024, KvtcCodeRun{1, 8});
  std::vector<uint8_t> all;
  for (size_t i = 0; i < runs.size(); ++i) all.insert(all.end(), codes.begin(), codes.end());
  for (KvtcCodesMethod method : {KvtcCodesMethod::kRansTuples, KvtcCodesMethod::kRansTuplesWide}) {
    auto section = EncodeKvtcCodes(all, runs, method);
    ASSERT_TRUE(section.ok());
    ASSERT_EQ((*section)[0], static_cast<uint8_t>(method));
    std::vector<KvtcCodeRun> misread = runs;
    misread[0] = {1, 5};
    misread.insert(misread.begin() + 1, KvtcCodeRun{1, 3});
    std::vector<uint8_t> back(all.size());
    const Status st = DecodeKvtcCodes(*section, misread, back);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.ToString();
    EXPECT_NE(st.message().find("padding"), std::string::npos) << st.ToString();
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
  for (KvtcCodesMethod method : kMethods) {
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
