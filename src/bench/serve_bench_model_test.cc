#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/serve_bench.h"

namespace kvc {
namespace {

// A small bench end to end against in-process servers: every request is answered well formed,
// and the shared-prefix class reuses its stored document only where reuse is on.
TEST(ServeBench, SmallRunServesEveryRequestAndReusesOnlyWithReuse) {
  ServeBenchOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.requests = 6;
  o.rate = 8;
  o.prefixes = 2;
  o.prefix_tokens = 512;
  o.suffix_tokens = 16;
  o.unique_tokens = 64;
  o.max_tokens = 4;
  o.configs = {"none", "kv-aware"};
  o.progress = false;
  auto report = RunServeBenchJson(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const auto j = nlohmann::json::parse(*report);
  EXPECT_GT(j["shared_reusable_fraction"].get<double>(), 0.9);
  ASSERT_EQ(j["configs"].size(), 2u);
  for (const auto& c : j["configs"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(c["errors"], 0) << c["error_examples"].dump();
    EXPECT_EQ(c["classes"]["shared_prefix"]["n"].get<int>() + c["classes"]["no_prefix"]["n"].get<int>(), 6);
    EXPECT_EQ(c["classes"]["no_prefix"]["cached_tokens"], 0);
    ASSERT_EQ(c["requests"].size(), 6u);
    for (const auto& r : c["requests"]) {
      EXPECT_TRUE(r["ok"].get<bool>());
      EXPECT_GT(r["ttft_s"].get<double>(), 0);
      EXPECT_GE(r["latency_s"].get<double>(), r["ttft_s"].get<double>());
      EXPECT_GE(r["completion_tokens"].get<int>(), 1);  // 4 unless the model ends the text sooner
      EXPECT_LE(r["completion_tokens"].get<int>(), 4);
    }
    EXPECT_GT(c["completion_tokens_per_s"].get<double>(), 0);
  }
  EXPECT_EQ(j["configs"][0]["name"], "none");
  EXPECT_EQ(j["configs"][0]["classes"]["shared_prefix"]["hit_rate"], 0.0);
  EXPECT_GT(j["configs"][1]["classes"]["shared_prefix"]["hit_rate"].get<double>(), 0.0);
  EXPECT_TRUE(j["criteria"].contains("kv_aware_shared_p50_over_none"));
}

}  // namespace
}  // namespace kvc
