#include "serve/stop_filter.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

// Feeds `pieces` and returns every output, one string per push (then Finish's).
std::vector<std::string> Feed(StopFilter& f, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) out.push_back(f.Push(p));
  out.push_back(f.Finish());
  return out;
}

std::string Joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += p;
  return s;
}

TEST(StopFilter, TextEndsBeforeTheStopStringEvenAcrossPieces) {
  StopFilter f({"END"});
  const auto out = Feed(f, {"hello E", "N", "D and more", "ignored"});
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(Joined(out), "hello ");
  // The "E" that might have begun the stop string was held back, never sent and taken back.
  EXPECT_EQ(out[0], "hello ");
  EXPECT_EQ(out[1], "");
  EXPECT_EQ(f.emitted(), 6u);
}

TEST(StopFilter, HeldTextIsReleasedWhenItTurnsOutNotToBeAStop) {
  StopFilter f({"END"});
  const auto out = Feed(f, {"a E", "N", "x", "tail E"});
  EXPECT_FALSE(f.stopped());
  EXPECT_EQ(out[0], "a ");
  EXPECT_EQ(out[1], "");
  EXPECT_EQ(out[2], "ENx");
  EXPECT_EQ(out[3], "tail ");
  EXPECT_EQ(out[4], "E");  // the end of the generation releases what was held
  EXPECT_EQ(Joined(out), "a ENxtail E");
}

TEST(StopFilter, TheEarliestOfSeveralStopsWins) {
  StopFilter f({"world", "lo w", "\n\n"});
  EXPECT_EQ(Joined(Feed(f, {"hel", "lo wor", "ld"})), "hel");
  StopFilter g({"b", "abc"});
  EXPECT_EQ(Joined(Feed(g, {"xxa", "bc"})), "xx");  // "abc" begins before "b" does
}

TEST(StopFilter, StopAtTheVeryStartAndNoStopsAtAll) {
  StopFilter f({"\n"});
  EXPECT_EQ(Joined(Feed(f, {"\nrest"})), "");
  EXPECT_TRUE(f.stopped());
  StopFilter none;
  EXPECT_EQ(Joined(Feed(none, {"a", "b"})), "ab");
  EXPECT_EQ(none.emitted(), 2u);
}

TEST(StopFilter, MultiByteCharactersAreNeverSplit) {
  StopFilter f({"é!"});
  const auto out = Feed(f, {"caf", "é", "s"});
  EXPECT_EQ(out[1], "");  // "é" may begin "é!": held whole
  EXPECT_EQ(out[2], "és");
  EXPECT_EQ(Joined(out), "cafés");
}

// Every way of cutting a text into pieces gives the same result as the whole text at once.
TEST(StopFilter, PieceBoundariesDoNotChangeTheResult) {
  const std::string text = "the cat sat on the mat; the end. after";
  const std::vector<std::string> stops = {"the end", "mat;x", "t on"};
  StopFilter whole(stops);
  const std::string expected = Joined(Feed(whole, {text}));
  EXPECT_EQ(expected, "the cat sa");
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); b += 3) {
      StopFilter f(stops);
      EXPECT_EQ(Joined(Feed(f, {text.substr(0, a), text.substr(a, b - a), text.substr(b)})), expected) << a << " " << b;
    }
  }
}

}  // namespace
}  // namespace kvc
