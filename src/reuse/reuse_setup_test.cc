#include "reuse/reuse_setup.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kvc {
namespace {

// No model is read: every check comes before the model loads, so a path with nothing behind it
// shows whether the options were refused (kInvalidArgument, their message) or let through (the
// load's kNotFound).
constexpr const char* kNoModel = "/nonexistent/kvc-reuse-setup-test.gguf";

ReuseSetupOptions Valid() {
  ReuseSetupOptions o;
  o.model_path = kNoModel;
  o.codec = "quant";
  return o;
}

struct BadCase {
  const char* what;
  std::function<void(ReuseSetupOptions&)> edit;
  std::string message;
};

TEST(ReuseSetup, EachBadOptionIsRefusedByNameBeforeTheModelLoads) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<BadCase> cases = {
      {"unknown codec", [](auto& o) { o.codec = "nope"; }, "unknown codec 'nope'"},
      {"no chunk tokens", [](auto& o) { o.chunk_tokens = 0; }, "chunk tokens must be positive"},
      {"huge chunk", [](auto& o) { o.chunk_tokens = kMaxTokens + 1; }, "chunk tokens must be at most 4194304"},
      {"negative link", [](auto& o) { o.link_gbps = -1; }, "link rate -1 is not a finite, non-negative number of Gbps"},
      {"NaN link", [nan](auto& o) { o.link_gbps = nan; }, "link rate nan is not a finite, non-negative number of Gbps"},
      {"infinite link", [inf](auto& o) { o.link_gbps = inf; },
       "link rate inf is not a finite, non-negative number of Gbps"},
      {"negative fetch threads", [](auto& o) { o.fetch_threads = -1; }, "fetch threads must be in 0..64"},
      {"too many fetch threads", [](auto& o) { o.fetch_threads = 65; }, "fetch threads must be in 0..64"},
      {"no fetch thread where one is needed",
       [](auto& o) {
         o.min_fetch_threads = 1;
         o.fetch_threads = 0;
       },
       "fetch threads must be in 1..64"},
      {"negative ppl delta", [](auto& o) { o.quality.max_ppl_delta = -0.5; },
       "--max-ppl-delta must be >= 0 and --min-top1 in [0, 1]"},
      {"NaN ppl delta", [nan](auto& o) { o.quality.max_ppl_delta = nan; },
       "--max-ppl-delta must be >= 0 and --min-top1 in [0, 1]"},
      {"top-1 over 1", [](auto& o) { o.quality.min_top1 = 1.5; },
       "--max-ppl-delta must be >= 0 and --min-top1 in [0, 1]"},
      {"a level the codec lacks",
       [](auto& o) {
         o.levels = {"8", "3"};
       },
       "codec 'quant' has no level '3' (its levels: 8, 4)"},
      {"a level twice",
       [](auto& o) {
         o.levels = {"8", "4", "8"};
       },
       "codec 'quant': level '8' is asked for twice"},
      {"an empty level", [](auto& o) { o.levels = {""}; }, "codec 'quant': a level is empty"},
      {"levels without a codec",
       [](auto& o) {
         o.codec.clear();
         o.levels = {"8"};
       },
       "levels need a codec to be levels of"},
  };
  for (const BadCase& c : cases) {
    ReuseSetupOptions o = Valid();
    c.edit(o);
    const Status checked = CheckReuseOptions(o);
    EXPECT_EQ(checked.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(checked.message(), c.message) << c.what;
    // SetUpReuse refuses them with the same status, before it looks for the model.
    auto setup = SetUpReuse(o);
    ASSERT_FALSE(setup.ok()) << c.what;
    EXPECT_EQ(setup.status().ToString(), checked.ToString()) << c.what;
  }
}

TEST(ReuseSetup, ValidOptionsGoOnToTheModel) {
  std::vector<ReuseSetupOptions> valid(6, Valid());
  valid[1].codec = "kvtc";
  valid[1].levels = {"7"};  // kvtc's levels are its calibration's: checked when it encodes
  valid[2].codec.clear();   // the floor alone
  valid[3].levels = {"4", "8"};
  valid[4].fetch_threads = 64;
  valid[4].link_gbps = 0.01;
  valid[5].quality = {.max_ppl_delta = 0, .min_top1 = 1};
  for (size_t i = 0; i < valid.size(); ++i) {
    EXPECT_TRUE(CheckReuseOptions(valid[i]).ok()) << i << ": " << CheckReuseOptions(valid[i]).ToString();
    auto setup = SetUpReuse(valid[i]);
    ASSERT_FALSE(setup.ok()) << i;
    EXPECT_NE(setup.status().code(), StatusCode::kInvalidArgument) << i << ": " << setup.status().ToString();
    EXPECT_NE(setup.status().message().find(kNoModel), std::string::npos) << setup.status().ToString();
  }
}

TEST(ReuseSetup, TheListCheckersSayWhatCheckReuseOptionsSays) {
  EXPECT_EQ(CheckCodecName("nope").message(), "unknown codec 'nope'");
  for (const char* name : {"raw", "quant", "rotquant", "kvtc", "cachegen", "video"}) {
    EXPECT_TRUE(CheckCodecName(name).ok()) << name;
  }
  EXPECT_TRUE(CheckLinkGbps(0).ok());
  EXPECT_TRUE(CheckLinkGbps(10).ok());
  ReuseSetupOptions o = Valid();
  o.link_gbps = -2;
  EXPECT_EQ(CheckLinkGbps(-2).ToString(), CheckReuseOptions(o).ToString());
}

TEST(ReuseSetup, TheCalibrationErrorIsWordedOnce) {
  const Status s = NeedsCalibration("kvtc", "/m/model.gguf");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "codec 'kvtc' needs a calibration: run `kvcodec calibrate --model /m/model.gguf` or pass --calibration");
}

// The callers' options are copied by name: what a caller's struct has, and nothing it lacks.
TEST(ReuseSetup, OptionsAreCopiedByName) {
  struct Full {
    std::string model_path = "m", calibration = "c", profile = "p", codec = "rotquant", store_url = "mem://",
                store_secret = "s";
    std::vector<std::string> levels = {"3"};
    QualityLimits quality{.max_ppl_delta = 2, .min_top1 = 0.5};
    uint32_t chunk_tokens = 64;
    int fetch_threads = 3;
    double link_gbps = 0.5;
  };
  const ReuseSetupOptions f = ReuseSetupOptionsOf(Full{});
  EXPECT_EQ(f.model_path, "m");
  EXPECT_EQ(f.calibration, "c");
  EXPECT_EQ(f.profile, "p");
  EXPECT_EQ(f.codec, "rotquant");
  EXPECT_EQ(f.levels, std::vector<std::string>{"3"});
  EXPECT_EQ(f.store_url, "mem://");
  EXPECT_EQ(f.store_secret, "s");
  EXPECT_EQ(f.quality.max_ppl_delta, 2);
  EXPECT_EQ(f.quality.min_top1, 0.5);
  EXPECT_EQ(f.chunk_tokens, 64u);
  EXPECT_EQ(f.fetch_threads, 3);
  EXPECT_EQ(f.link_gbps, 0.5);
  // The TTFT bench's shape: several link rates and codecs, no store.
  struct Bench {
    std::string model_path = "m", calibration, profile;
    QualityLimits quality;
    uint32_t chunk_tokens = 128;
    int fetch_threads = 0;
    std::vector<double> link_gbps = {1, 10};
    std::vector<std::string> codecs = {"raw"};
  };
  const ReuseSetupOptions b = ReuseSetupOptionsOf(Bench{});
  EXPECT_EQ(b.chunk_tokens, 128u);
  EXPECT_EQ(b.link_gbps, 0);
  EXPECT_EQ(b.codec, ReuseSetupOptions{}.codec);
  EXPECT_TRUE(b.store_url.empty());
}

}  // namespace
}  // namespace kvc
