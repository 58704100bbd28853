#include "serve/slot_record.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(SlotRecord, RoundTripsModelAndTokens) {
  SlotRecord r;
  r.model[0] = 7;
  r.model[15] = 9;
  r.tokens = {1, 450, 2047, 0};
  const std::vector<uint8_t> bytes = SerializeSlotRecord(r);
  EXPECT_EQ(bytes.size(), 8u + 4 + 16 + 4 + 4 * 4);
  auto back = ParseSlotRecord(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model, r.model);
  EXPECT_EQ(back->tokens, r.tokens);
}

TEST(SlotRecord, RefusesEveryDamagedRecord) {
  SlotRecord r;
  r.tokens = {3, 4};
  const std::vector<uint8_t> good = SerializeSlotRecord(r);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ParseSlotRecord(std::span(good).first(n)).ok()) << "truncated to " << n;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_EQ(ParseSlotRecord(longer).status().code(), StatusCode::kCorrupt);
  std::vector<uint8_t> huge_count = good;
  huge_count[28] = 0xff;  // the count's low byte: far more tokens than the bytes hold
  huge_count[31] = 0x7f;
  EXPECT_EQ(ParseSlotRecord(huge_count).status().code(), StatusCode::kCorrupt);
  std::vector<uint8_t> negative = good;
  negative[good.size() - 1] = 0x80;
  EXPECT_EQ(ParseSlotRecord(negative).status().code(), StatusCode::kCorrupt);
  std::vector<uint8_t> magic = good;
  magic[0] = 'X';
  EXPECT_FALSE(ParseSlotRecord(magic).ok());
}

TEST(SlotRecord, FileNamesAreNamesNotPaths) {
  EXPECT_TRUE(CheckSlotFileName("prompt-a.bin").ok());
  EXPECT_TRUE(CheckSlotFileName("日本語.bin").ok());
  for (const char* bad : {"", "../x", "a/b", "a\\b", ".hidden", "..", "a\nb"}) {
    EXPECT_EQ(CheckSlotFileName(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(CheckSlotFileName(std::string(256, 'a')).ok());
  EXPECT_FALSE(CheckSlotFileName("\xff").ok());
  const ModelFingerprint a{}, b{1};
  EXPECT_NE(SlotRecordObjectName(a, "x"), SlotRecordObjectName(b, "x"));
  EXPECT_NE(SlotRecordObjectName(a, "x"), SlotRecordObjectName(a, "y"));
  EXPECT_EQ(SlotRecordObjectName(a, "x"), SlotRecordObjectName(a, "x"));
}

}  // namespace
}  // namespace kvc
