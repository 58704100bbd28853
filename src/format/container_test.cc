#include "format/container.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "base/utf8.h"

namespace kvc {
namespace {

KvcHeader SmallHeader() {
  KvcHeader h;
  h.codec_id = 7;
  h.codec_version = 3;
  h.level = "8";
  h.codec_params = {1, 2, 3, 4, 5};
  h.shape = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .n_tokens = 16};
  h.dtype = DType::kF16;
  for (size_t i = 0; i < h.model_fingerprint.size(); ++i) h.model_fingerprint[i] = static_cast<uint8_t>(0xA0 + i);
  h.token_begin = 256;
  h.pos_begin = 300;
  return h;
}

std::vector<KvcSection> SmallSections() {
  std::vector<KvcSection> s(3);
  s[0].tag = 0x4B455953;  // "KEYS"
  s[0].bytes = {10, 20, 30, 40, 50, 60, 70};
  s[1].tag = 2;  // empty section
  s[2].tag = 0xFFFFFFFF;
  s[2].bytes.resize(33);
  std::iota(s[2].bytes.begin(), s[2].bytes.end(), uint8_t{100});
  return s;
}

std::vector<uint8_t> SmallFile() {
  auto written = WriteKvc(SmallHeader(), SmallSections());
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  return written.ok() ? *written : std::vector<uint8_t>{};
}

void ExpectHeadersEqual(const KvcHeader& a, const KvcHeader& b) {
  EXPECT_EQ(a.codec_id, b.codec_id);
  EXPECT_EQ(a.codec_version, b.codec_version);
  EXPECT_EQ(a.level, b.level);
  EXPECT_EQ(a.codec_params, b.codec_params);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.model_fingerprint, b.model_fingerprint);
  EXPECT_EQ(a.token_begin, b.token_begin);
  EXPECT_EQ(a.pos_begin, b.pos_begin);
}

// Field values for a hand-built header; lets tests write values WriteKvc refuses to emit.
struct RawHeader {
  uint32_t version = kKvcFormatVersion;
  std::string level = "8";
  uint32_t level_len_override = UINT32_MAX;  // UINT32_MAX: use level.size()
  uint32_t params_len = 0;
  uint32_t n_layers = 2, n_kv_heads = 2, head_dim = 8, n_tokens = 16;
  uint8_t dtype = static_cast<uint8_t>(DType::kF16);
  uint32_t token_begin = 0;
  int32_t pos_begin = 0;
  uint32_t n_sections = 0;
  int header_length_delta = 0;
};

std::vector<uint8_t> BuildRaw(const RawHeader& f) {
  ByteWriter w;
  w.Bytes("KVC1", 4);
  w.U32(f.version);
  w.U32(0);
  w.U16(1);
  w.U16(1);
  w.U32(f.level_len_override != UINT32_MAX ? f.level_len_override : static_cast<uint32_t>(f.level.size()));
  w.Bytes(f.level.data(), f.level.size());
  w.U32(f.params_len);
  w.U32(f.n_layers);
  w.U32(f.n_kv_heads);
  w.U32(f.head_dim);
  w.U32(f.n_tokens);
  w.U8(f.dtype);
  const uint8_t fingerprint[16] = {};
  w.Bytes(fingerprint, sizeof(fingerprint));
  w.U32(f.token_begin);
  w.I32(f.pos_begin);
  w.U32(f.n_sections);
  w.PatchU32(8, static_cast<uint32_t>(static_cast<int>(w.size()) - 12 + f.header_length_delta));
  w.U32(Crc32c(w.bytes().data(), w.size()));
  return w.Take();
}

Status ReadStatus(const std::vector<uint8_t>& bytes) { return ReadKvc(bytes).status(); }

TEST(ContainerTest, RoundTripsHeaderAndSections) {
  const KvcHeader header = SmallHeader();
  const std::vector<KvcSection> sections = SmallSections();
  const std::vector<uint8_t> bytes = SmallFile();
  auto file = ReadKvc(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ExpectHeadersEqual(file->header, header);
  ASSERT_EQ(file->sections.size(), sections.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    EXPECT_EQ(file->sections[i].tag, sections[i].tag);
    EXPECT_EQ(std::vector<uint8_t>(file->sections[i].bytes.begin(), file->sections[i].bytes.end()), sections[i].bytes);
  }
  EXPECT_TRUE(file->sections[1].bytes.empty());
}

TEST(ContainerTest, SectionViewsPointIntoTheInput) {
  const std::vector<uint8_t> bytes = SmallFile();
  auto file = ReadKvc(bytes);
  ASSERT_TRUE(file.ok());
  for (const KvcSectionView& s : file->sections) {
    EXPECT_GE(s.bytes.data(), bytes.data());
    EXPECT_LE(s.bytes.data() + s.bytes.size(), bytes.data() + bytes.size());
  }
  EXPECT_EQ(file->sections.back().bytes.data() + file->sections.back().bytes.size(), bytes.data() + bytes.size());
}

TEST(ContainerTest, RoundTripsEmptyHeaderFieldsAndNoSections) {
  KvcHeader h;
  h.shape = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 1, .n_tokens = 0};
  h.dtype = DType::kBF16;
  h.pos_begin = -5;
  auto bytes = WriteKvc(h, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto file = ReadKvc(*bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ExpectHeadersEqual(file->header, h);
  EXPECT_TRUE(file->sections.empty());
}

TEST(ContainerTest, AKeysOnlyShapeRoundTripsInTheDtypeByte) {
  KvcHeader h = SmallHeader();
  h.shape.keys_only = true;
  h.dtype = DType::kBF16;
  const std::vector<uint8_t> bytes = WriteKvc(h, SmallSections()).value();
  auto file = ReadKvc(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ExpectHeadersEqual(file->header, h);
  EXPECT_TRUE(file->header.shape.keys_only);
  // Without the flag the same header differs in that one byte (the dtype's) and its CRC.
  const std::vector<uint8_t> plain = WriteKvc(SmallHeader(), SmallSections()).value();
  ASSERT_EQ(plain.size(), bytes.size());
  const size_t dtype_at = 24 + h.level.size() + h.codec_params.size() + 16;
  EXPECT_EQ(bytes[dtype_at], static_cast<uint8_t>(DType::kBF16) | kKvcKeysOnlyBit);
  EXPECT_EQ(plain[dtype_at], static_cast<uint8_t>(DType::kF16));
  EXPECT_FALSE(ReadKvc(WriteKvc(SmallHeader(), {}).value()).value().header.shape.keys_only);
}

TEST(ContainerTest, WritingIsDeterministic) {
  auto a = WriteKvc(SmallHeader(), SmallSections());
  auto b = WriteKvc(SmallHeader(), SmallSections());
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(ContainerTest, RewritingAParsedFileReproducesItsBytes) {
  const std::vector<uint8_t> bytes = SmallFile();
  auto file = ReadKvc(bytes);
  ASSERT_TRUE(file.ok());
  std::vector<KvcSection> sections;
  for (const auto& s : file->sections) sections.push_back({s.tag, {s.bytes.begin(), s.bytes.end()}});
  auto again = WriteKvc(file->header, sections);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, bytes);
}

TEST(ContainerTest, EverySingleByteFlipFails) {
  const std::vector<uint8_t> bytes = SmallFile();
  ASSERT_TRUE(ReadKvc(bytes).ok());
  for (uint8_t mask : {uint8_t{0xFF}, uint8_t{0x01}, uint8_t{0x80}}) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::vector<uint8_t> damaged = bytes;
      damaged[i] ^= mask;
      const Status s = ReadStatus(damaged);
      EXPECT_FALSE(s.ok()) << "flip 0x" << std::hex << int{mask} << std::dec << " at offset " << i << " was accepted";
      EXPECT_TRUE(s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported) << s.ToString();
      EXPECT_EQ(s.message().find('\n'), std::string::npos);
    }
  }
}

TEST(ContainerTest, EveryTruncationFails) {
  const std::vector<uint8_t> bytes = SmallFile();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const Status s = ReadKvc(std::span(bytes.data(), n)).status();
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << "prefix of " << n << " bytes: " << s.ToString();
  }
}

TEST(ContainerTest, TrailingBytesFail) {
  std::vector<uint8_t> bytes = SmallFile();
  bytes.push_back(0);
  const Status s = ReadStatus(bytes);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("trailing"), std::string::npos) << s.message();
}

TEST(ContainerTest, BadMagicIsNamed) {
  std::vector<uint8_t> bytes = SmallFile();
  bytes[0] = 'G';
  const Status s = ReadStatus(bytes);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "not a .kvc file (bad magic)");
}

TEST(ContainerTest, NewerVersionIsUnsupported) {
  RawHeader f;
  f.version = 2;
  const Status s = ReadStatus(BuildRaw(f));
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_EQ(s.message(), "format version 2 not supported (this build reads 1)");
}

TEST(ContainerTest, HandBuiltHeaderParses) {
  // Guards the raw builder itself, so the rejections below are caused by the altered field.
  auto file = ReadKvc(BuildRaw(RawHeader{}));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->header.shape.n_tokens, 16u);
}

TEST(ContainerTest, AbsurdShapeFailsWithoutAllocating) {
  RawHeader f;
  f.n_layers = f.n_kv_heads = f.head_dim = f.n_tokens = 0xFFFFFFFF;
  const Status s = ReadStatus(BuildRaw(f));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("n_layers"), std::string::npos) << s.message();

  RawHeader big;  // every dimension within its own limit, the product past kMaxKvBytes
  big.n_layers = kMaxLayers;
  big.n_kv_heads = kMaxKvHeads;
  big.head_dim = kMaxHeadDim;
  big.n_tokens = kMaxTokens;
  const Status s2 = ReadStatus(BuildRaw(big));
  EXPECT_EQ(s2.code(), StatusCode::kCorrupt);
  EXPECT_NE(s2.message().find("exceeds"), std::string::npos) << s2.message();
}

TEST(ContainerTest, HeaderLimitsAreChecked) {
  {
    RawHeader f;
    f.dtype = 9;
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("dtype 9"), std::string::npos) << s.message();
  }
  {
    RawHeader f;
    f.n_sections = kMaxSections + 1;
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("sections exceed"), std::string::npos) << s.message();
  }
  {
    RawHeader f;
    f.level = std::string(kMaxLevelNameBytes + 1, 'x');
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("level length 65 exceeds"), std::string::npos) << s.message();
  }
  {
    RawHeader f;
    f.level_len_override = 0xFFFFFFF0;  // a huge length with no bytes behind it
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("level"), std::string::npos) << s.message();
  }
  {
    RawHeader f;
    f.params_len = 0xFFFFFFFF;
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("codec params length"), std::string::npos) << s.message();
  }
  {
    RawHeader f;
    f.token_begin = 0xFFFFFFF8;
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("token range"), std::string::npos) << s.message();
  }
  {
    RawHeader f;
    f.pos_begin = INT32_MAX - 3;
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("position range"), std::string::npos) << s.message();
  }
}

TEST(ContainerTest, HeaderLengthMustMatchTheFields) {
  // Extra body bytes the fields do not account for: a valid CRC cannot make them acceptable.
  RawHeader f;
  std::vector<uint8_t> bytes = BuildRaw(f);
  const size_t body_end = bytes.size() - 4;
  bytes.resize(body_end);
  bytes.insert(bytes.end(), {0, 0, 0, 0});
  const uint32_t len = static_cast<uint32_t>(body_end - 12 + 4);
  for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<uint8_t>(len >> (8 * i));
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(crc >> (8 * i)));
  const Status s = ReadStatus(bytes);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("disagrees"), std::string::npos) << s.message();

  RawHeader short_len;
  short_len.header_length_delta = -1;
  EXPECT_EQ(ReadStatus(BuildRaw(short_len)).code(), StatusCode::kCorrupt);

  RawHeader absurd;
  absurd.header_length_delta = 1 << 30;
  const Status s3 = ReadStatus(BuildRaw(absurd));
  EXPECT_EQ(s3.code(), StatusCode::kCorrupt);
  EXPECT_NE(s3.message().find("header_length"), std::string::npos) << s3.message();
}

TEST(ContainerTest, HeaderCrcMismatchIsNamed) {
  std::vector<uint8_t> bytes = SmallFile();
  bytes[20] ^= 0x10;  // inside the header body
  const Status s = ReadStatus(bytes);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("header: CRC32C mismatch"), std::string::npos) << s.message();
}

TEST(ContainerTest, SectionCrcMismatchNamesTheSection) {
  std::vector<uint8_t> bytes = SmallFile();
  bytes.back() ^= 0x01;  // last byte of section 2
  const Status s = ReadStatus(bytes);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "section 2 (tag 0xffffffff): CRC32C mismatch");
}

TEST(ContainerTest, HugeSectionLengthFailsWithoutOverflow) {
  RawHeader f;
  f.n_sections = 1;
  ByteWriter w;
  w.Bytes(BuildRaw(f));
  w.U32(5);
  w.U64(UINT64_MAX - 2);
  w.U32(0);
  w.Bytes("abc", 3);
  const Status s = ReadStatus(w.bytes());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("section 0 (tag 0x00000005): length"), std::string::npos) << s.message();
}

TEST(ContainerTest, MissingSectionFails) {
  RawHeader f;
  f.n_sections = kMaxSections;  // claims many sections, holds none: must not reserve for them
  const Status s = ReadStatus(BuildRaw(f));
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("section 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

TEST(ContainerTest, WriterRejectsWhatTheReaderWould) {
  {
    KvcHeader h = SmallHeader();
    h.level = std::string(kMaxLevelNameBytes + 1, 'x');
    EXPECT_EQ(WriteKvc(h, {}).status().code(), StatusCode::kInvalidArgument);
  }
  {
    KvcHeader h = SmallHeader();
    h.codec_params.resize(kMaxCodecParamsBytes + 1);
    EXPECT_EQ(WriteKvc(h, {}).status().code(), StatusCode::kInvalidArgument);
  }
  {
    KvcHeader h = SmallHeader();
    h.shape.head_dim = 0;
    const Status s = WriteKvc(h, {}).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s.message();
  }
  {
    KvcHeader h = SmallHeader();
    h.dtype = static_cast<DType>(77);
    EXPECT_EQ(WriteKvc(h, {}).status().code(), StatusCode::kInvalidArgument);
  }
  {
    KvcHeader h = SmallHeader();
    h.token_begin = UINT32_MAX;
    EXPECT_EQ(WriteKvc(h, {}).status().code(), StatusCode::kInvalidArgument);
  }
  {
    std::vector<KvcSection> sections(kMaxSections + 1);
    const Status s = WriteKvc(SmallHeader(), sections).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("sections"), std::string::npos) << s.message();
  }
  {
    std::vector<KvcSection> sections(kMaxSections);
    auto bytes = WriteKvc(SmallHeader(), sections);
    ASSERT_TRUE(bytes.ok());
    EXPECT_TRUE(ReadKvc(*bytes).ok());
  }
}

// Levels are printed (errors, `kvcodec inspect` JSON, object names): a file must not be able to
// put broken UTF-8, a second line, a NUL or a terminal escape there.
TEST(ContainerTest, LevelOutsideTheNameCharsetIsRejected) {
  const std::string hostile[] = {
      "\xe4",                                   // not UTF-8 (made `inspect` abort in JSON)
      "8\nkvcodec: error: forged second line",  // a newline forging a second error line
      std::string("8\0hidden", 8),              // a NUL cutting a C string short
      "\x1b[2J\x1b[31mred",                     // terminal escape sequences
      "a b",
      "a/b",
      "\"8\"",
      "\xc3\xa9",
      "\x7f",
  };
  for (const std::string& level : hostile) {
    SCOPED_TRACE(PrintableOneLine(level));
    RawHeader f;
    f.level = level;
    const Status s = ReadStatus(BuildRaw(f));
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("level name holds byte 0x"), std::string::npos) << s.message();
    const std::string line = s.ToString();
    EXPECT_TRUE(IsValidUtf8(line)) << line;
    for (char c : line) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) << line;

    KvcHeader h = SmallHeader();
    h.level = level;
    const Status w = WriteKvc(h, {}).status();
    EXPECT_EQ(w.code(), StatusCode::kInvalidArgument) << w.ToString();
  }
}

TEST(ContainerTest, EveryNameCharRoundTripsInALevel) {
  // The levels the codecs write, and every byte of the charset.
  std::string all;
  for (int c = 0; c < 256; ++c) {
    if (IsNameChar(static_cast<char>(c))) all += static_cast<char>(c);
  }
  EXPECT_EQ(all.size(), 26u + 26u + 10u + 4u);
  for (const std::string& level : {std::string("fp16"), std::string("8"), std::string("high"), std::string("16"),
                                   std::string("1e+06"), std::string("0.5"), all.substr(0, 33), all.substr(33)}) {
    KvcHeader h = SmallHeader();
    h.level = level;
    auto bytes = WriteKvc(h, {});
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto file = ReadKvc(*bytes);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->header.level, level);
  }
}

// Writes container seeds for the level charset into fuzz/corpus/container/: one level of every
// name byte (valid), one with a newline (rejected), so mutations start at the check.
TEST(ContainerTest, DISABLED_WriteLevelSeeds) {
  std::string all;
  for (int c = 0; c < 256; ++c) {
    if (IsNameChar(static_cast<char>(c)) && all.size() < kMaxLevelNameBytes) all += static_cast<char>(c);
  }
  KvcHeader h = SmallHeader();
  h.level = all;
  const auto valid = WriteKvc(h, SmallSections()).value();
  RawHeader f;
  f.level = "8\nkvcodec: error: forged";
  const auto newline = BuildRaw(f);
  const std::string dir = std::string(KVCODEC_SOURCE_DIR) + "/fuzz/corpus/container/";
  std::ofstream(dir + "level_every_name_char.kvc", std::ios::binary)
      .write(reinterpret_cast<const char*>(valid.data()), static_cast<std::streamsize>(valid.size()));
  std::ofstream(dir + "level_with_newline.kvc", std::ios::binary)
      .write(reinterpret_cast<const char*>(newline.data()), static_cast<std::streamsize>(newline.size()));
}

TEST(ContainerTest, MaximalHeaderRoundTrips) {
  KvcHeader h = SmallHeader();
  h.level = std::string(kMaxLevelNameBytes, 'L');
  h.codec_params.assign(kMaxCodecParamsBytes, 0x5A);
  auto bytes = WriteKvc(h, SmallSections());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto file = ReadKvc(*bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ExpectHeadersEqual(file->header, h);
}

}  // namespace
}  // namespace kvc
