#include "base/comma_list.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(CommaList, SplitDropsEmptyItems) {
  EXPECT_EQ(SplitCommaList(""), std::vector<std::string>{});
  EXPECT_EQ(SplitCommaList("raw"), std::vector<std::string>{"raw"});
  EXPECT_EQ(SplitCommaList(",raw,,quant,"), (std::vector<std::string>{"raw", "quant"}));
}

TEST(CommaList, KeyValuesLaterKeyWinsAndEmptyValuesStay) {
  std::map<std::string, std::string> out;
  ASSERT_TRUE(ParseKeyValues("coder=x265,,preset=fast", "codec parameter", &out).ok());
  ASSERT_TRUE(ParseKeyValues("coder=ffv1,a=", "codec parameter", &out).ok());
  EXPECT_EQ(out, (std::map<std::string, std::string>{{"a", ""}, {"coder", "ffv1"}, {"preset", "fast"}}));
  for (const char* bad : {"coder", "=x265", "a=1,b"}) {
    std::map<std::string, std::string> ignored;
    const Status s = ParseKeyValues(bad, "codec parameter", &ignored);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  std::map<std::string, std::string> ignored;
  EXPECT_EQ(ParseKeyValues("a=1,b", "codec parameter", &ignored).message(), "codec parameter 'b' is not key=value");
}

}  // namespace
}  // namespace kvc
