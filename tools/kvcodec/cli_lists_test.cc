// The list options' syntax, checked at the command line's edge before any model loads (what the
// values may be is the library's to check: src/bench/ttft_bench.cc, src/reuse/reuse_setup.cc).
#include "cli_lists.h"

#include <gtest/gtest.h>

namespace kvcodec_cli {
namespace {

TEST(CliLists, CodecParamsAreKeyValuePairsInOneOptionOrMany) {
  auto params = ParseCodecParams({"coder=x265,preset=fast", "", "coder=ffv1"});
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  EXPECT_EQ(*params, (std::map<std::string, std::string>{{"coder", "ffv1"}, {"preset", "fast"}}));
  EXPECT_EQ(ParseCodecParams({"a="})->at("a"), "");
  for (const char* bad : {"coder", "=x265", "a=1,b"}) {
    auto refused = ParseCodecParams({bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), kvc::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseCodecParams({"a=1,b"}).status().message(), "codec parameter 'b' is not key=value");
}

TEST(CliLists, LinkRatesAreNumbers) {
  auto rates = ParseLinkRates("0.01,1,,10");
  ASSERT_TRUE(rates.ok());
  EXPECT_EQ(*rates, (std::vector<double>{0.01, 1, 10}));
  // A number's range is the library's to check: only the syntax is refused here.
  EXPECT_EQ(*ParseLinkRates("0,-1"), (std::vector<double>{0, -1}));
  for (const char* bad : {"x", "1,x", "1Gbps", "0.5 "}) {
    auto refused = ParseLinkRates(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), kvc::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseLinkRates("1,x").status().message(), "link rate 'x' is not a number of Gbps");
}

// Moved from the tools' C entry points (src/capi/kvcodec_tools_test.cc), which parsed the list.
TEST(CliLists, PrefixLengthsAreTokenCounts) {
  auto lengths = ParsePrefixLengths("1024,4096,4294967295");
  ASSERT_TRUE(lengths.ok());
  EXPECT_EQ(*lengths, (std::vector<uint32_t>{1024, 4096, 4294967295u}));
  // 0 and lengths that are not whole chunks are numbers: RunTtftBenchJson refuses them.
  EXPECT_EQ(*ParsePrefixLengths("0,300"), (std::vector<uint32_t>{0, 300}));
  for (const char* bad : {"abc", "-256", "4096x", "+256", "4294967296", "99999999999", " 256"}) {
    auto refused = ParsePrefixLengths(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), kvc::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParsePrefixLengths("abc").status().message(), "prefix length 'abc' is not a number of tokens");
}

}  // namespace
}  // namespace kvcodec_cli
