// The command line's extra entry points (kvcodec_tools.h), linked statically as the CLI links them.
#include "kvcodec_tools.h"

#include <gtest/gtest.h>

namespace {

// A scale benchmark's list and thread counts are checked before any model loads.
TEST(CApiTools, BenchTtftRefusesBadPrefixLengthsAndThreadCounts) {
  for (const char* prefixes : {"0", "abc", "-256", "4096x", "300"}) {
    kvc_bench_ttft_params p{};
    p.model_path = KVCODEC_TEST_MODEL;
    p.prefix_tokens = prefixes;
    p.quiet = 1;
    auto report = kvcodec::BenchTtftJson(p);
    ASSERT_FALSE(report.ok()) << prefixes;
    EXPECT_EQ(report.error().code, KVC_INVALID_ARGUMENT) << prefixes;
  }
  kvc_bench_ttft_params p{};
  p.model_path = KVCODEC_TEST_MODEL;
  p.n_fetch_threads = -1;
  EXPECT_EQ(kvcodec::BenchTtftJson(p).error().code, KVC_INVALID_ARGUMENT);
}

// The tools share the C API's guard and messages: a missing model is a one-line error, not a crash.
TEST(CApiTools, ErrorsComeBackAsStatusAndMessage) {
  kvc_eval_params p{};
  p.model_path = "/nonexistent/model.gguf";
  auto report = kvcodec::EvalJson(p);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("/nonexistent/model.gguf"), std::string::npos) << report.error().message;
  kvc_bench_codec_params b{};
  EXPECT_FALSE(kvcodec::BenchCodecJson(b).ok());  // no model path
}

}  // namespace
