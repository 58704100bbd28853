#include "base/byte_io.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(ByteIo, RoundTripLittleEndian) {
  ByteWriter w;
  w.U8(0xab);
  w.U16(0x1234);
  w.U32(0xdeadbeef);
  w.U64(0x0102030405060708ull);
  w.I32(-5);
  w.F32(1.5f);
  w.String("hi");
  const auto& b = w.bytes();
  ASSERT_EQ(b.size(), 1u + 2 + 4 + 8 + 4 + 4 + 4 + 2);
  EXPECT_EQ(b[1], 0x34);  // little-endian
  EXPECT_EQ(b[2], 0x12);

  ByteReader r(b);
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  int32_t i32;
  float f;
  std::string s;
  ASSERT_TRUE(r.U8(&u8, "a").ok());
  ASSERT_TRUE(r.U16(&u16, "b").ok());
  ASSERT_TRUE(r.U32(&u32, "c").ok());
  ASSERT_TRUE(r.U64(&u64, "d").ok());
  ASSERT_TRUE(r.I32(&i32, "e").ok());
  ASSERT_TRUE(r.F32(&f, "f").ok());
  ASSERT_TRUE(r.String(&s, 16, "g").ok());
  EXPECT_EQ(u8, 0xab);
  EXPECT_EQ(u16, 0x1234);
  EXPECT_EQ(u32, 0xdeadbeefu);
  EXPECT_EQ(u64, 0x0102030405060708ull);
  EXPECT_EQ(i32, -5);
  EXPECT_EQ(f, 1.5f);
  EXPECT_EQ(s, "hi");
  EXPECT_TRUE(r.empty());
}

TEST(ByteIo, TruncationNamesTheField) {
  const std::vector<uint8_t> b = {1, 2, 3};
  ByteReader r(b);
  uint32_t v;
  Status s = r.U32(&v, "section length");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("section length"), std::string::npos);
  EXPECT_EQ(r.offset(), 0u);  // a failed read consumes nothing
}

TEST(ByteIo, StringLengthIsBounded) {
  ByteWriter w;
  w.U32(1000);  // claims 1000 bytes, has none
  ByteReader r(w.bytes());
  std::string s;
  EXPECT_FALSE(r.String(&s, 64, "name").ok());
  ByteReader r2(w.bytes());
  EXPECT_FALSE(r2.String(&s, 4096, "name").ok());
}

TEST(ByteIo, PatchOverwrites) {
  ByteWriter w;
  w.U32(0);
  w.U64(0);
  w.PatchU32(0, 7);
  w.PatchU64(4, 9);
  ByteReader r(w.bytes());
  uint32_t a;
  uint64_t b;
  ASSERT_TRUE(r.U32(&a, "a").ok());
  ASSERT_TRUE(r.U64(&b, "b").ok());
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(b, 9u);
}

}  // namespace
}  // namespace kvc
