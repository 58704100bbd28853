#include "base/utf8.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "base/log.h"
#include "base/status.h"

namespace kvc {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidAndInvalid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ASCII"));
  EXPECT_TRUE(IsValidUtf8("\xE4\xB8\xAD"));       // 中
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));   // 😀
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE4"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\x80"));
}

TEST(Utf8, ReplacesMaximalSubparts) {
  EXPECT_EQ(ToValidUtf8("a\xE4"
                        "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98"
                        "x"),
            kFffd + "x");                             // one U+FFFD for a truncated character
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), kFffd + kFffd);  // C0 is never valid, then a lone continuation
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(ToValidUtf8("\xE4\xB8\xAD"), "\xE4\xB8\xAD");
  EXPECT_EQ(ToValidUtf8("\xE4\xB8"), kFffd);  // ends inside a character
}

TEST(Utf8, StreamHoldsBackASplitCharacterUntilItCompletes) {
  Utf8Stream s;
  EXPECT_EQ(s.Push("ab\xF0"), "ab");
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.Push("\x9F"), "");
  EXPECT_EQ(s.Push("\x98"), "");
  EXPECT_EQ(s.Push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.Finish(), "");
}

TEST(Utf8, StreamReplacesWhatCanNeverComplete) {
  Utf8Stream s;
  EXPECT_EQ(s.Push("\xE4"), "");
  EXPECT_EQ(s.Push(" the"), kFffd + " the");  // the lead byte's character was cut by a space
  EXPECT_EQ(s.Push("\xE4\xB8"), "");
  EXPECT_EQ(s.Finish(), kFffd);  // the stream ended inside a character
}

TEST(Utf8, StreamOfRandomPiecesEqualsWholeConversion) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Mostly bytes that matter to UTF-8: leads, continuations, ASCII.
      static const uint8_t kPool[] = {'a',  ' ',  0x80, 0x9F, 0xA0, 0xBF, 0xC2, 0xDF, 0xE0, 0xE4, 0xED,
                                      0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0xC0, 0x8F, 0x90, 0xB8, 0xAD};
      bytes += static_cast<char>(kPool[rng() % sizeof kPool]);
    }
    Utf8Stream s;
    std::string streamed;
    for (size_t i = 0; i < bytes.size();) {
      const size_t len = 1 + rng() % 4;
      streamed += s.Push(std::string_view(bytes).substr(i, len));
      i += len;
    }
    streamed += s.Finish();
    const std::string whole = ToValidUtf8(bytes);
    ASSERT_EQ(streamed, whole) << "trial " << trial;
    ASSERT_TRUE(IsValidUtf8(whole));
  }
}

TEST(Utf8, PrintableOneLineEscapesControls) {
  EXPECT_EQ(PrintableOneLine("level 8"), "level 8");
  EXPECT_EQ(PrintableOneLine("a\nkvcodec: error: forged"), "a\\x0Akvcodec: error: forged");
  EXPECT_EQ(PrintableOneLine(std::string("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(PrintableOneLine("\x1B[31mred"), "\\x1B[31mred");
  EXPECT_EQ(PrintableOneLine("\xC2\x9B"
                             "31m"),
            "\\x9B31m");  // C1 CSI
  EXPECT_EQ(PrintableOneLine("\xE4"), kFffd);
  EXPECT_EQ(PrintableOneLine("\xE4\xB8\xAD"), "\xE4\xB8\xAD");
}

TEST(Utf8, StatusMessagesPrintOnOneLine) {
  const Status s = Corrupt("level '\n\x1B[2J\xFF'");
  EXPECT_EQ(s.ToString(), "corrupt: level '\\x0A\\x1B[2J" + kFffd + "'");
}

// A log line quotes files, requests and exception texts: it cannot forge another line or reach
// the terminal as an escape sequence either.
TEST(Utf8, LogMessagesPrintOnOneLine) {
  const LogLevel was = GetLogLevel();
  SetLogLevel(LogLevel::kWarn);
  testing::internal::CaptureStderr();
  KVC_LOG_WARN("reuse failed: %s", "a\x1B[2J\nkvcodec: error: forged\xFF");
  const std::string err = testing::internal::GetCapturedStderr();
  SetLogLevel(was);
  EXPECT_EQ(err, "kvcodec warn: reuse failed: a\\x1B[2J\\x0Akvcodec: error: forged" + kFffd + "\n");
}

}  // namespace
}  // namespace kvc
