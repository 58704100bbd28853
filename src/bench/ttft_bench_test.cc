// `bench ttft`, `run` and `serve` set reuse up the same way (reuse/reuse_setup.h): what one of
// them refuses, the others refuse in the same words.
#include "bench/ttft_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <limits>

#include "reuse/reuse_setup.h"
#include "reuse/run_job.h"
#include "serve/completion_server.h"

namespace kvc {
namespace {

const std::string kEvalText = (std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").string();

TtftBenchOptions BenchOf(const std::string& model) {
  TtftBenchOptions o;
  o.model_path = model;
  o.text_path = kEvalText;
  o.prompt_tokens = 512;
  o.link_gbps = {1};
  o.repeats = 1;
  o.threads = 1;
  o.progress = false;
  return o;
}

RunOptions RunOf(const std::string& model) {
  RunOptions o;
  o.model_path = model;
  o.prompt = "In the beginning God created the heaven and the earth.";
  o.store_url = "mem://";
  o.n_generate = 2;
  o.threads = 1;
  return o;
}

ServerOptions ServeOf(const std::string& model) {
  ServerOptions o;
  o.model_path = model;
  o.store_url = "mem://";
  o.port = 0;
  o.threads = 1;
  o.plan_recompute = false;
  return o;
}

// A codec that needs a calibration, asked for by name for a model without one: the bench and
// `run` (levels named) say it in the set-up's one wording.
TEST(TtftBench, ACodecAskedForByNameNeedsItsCalibrationAsRunSays) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-ttft-bench-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "m.gguf").string();
  std::filesystem::copy_file(KVCODEC_TEST_MODEL, model);
  const std::string expected = NeedsCalibration("kvtc", model).ToString();

  TtftBenchOptions bench = BenchOf(model);
  bench.codecs = {"raw", "kvtc"};
  EXPECT_EQ(RunTtftBenchJson(bench).status().ToString(), expected);
  RunOptions run = RunOf(model);
  run.codec = "kvtc";
  run.levels = {"16"};
  EXPECT_EQ(RunJob(run).status().ToString(), expected);
  // Not named, it is left out: the bench measures the codecs this model can use.
  bench.codecs.clear();
  bench.link_gbps = {10};
  bench.prompt_tokens = 300;
  bench.chunk_tokens = 256;
  auto report = RunTtftBenchJson(bench);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->find("\"kvtc\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Each bad reuse option, refused by all three before the model loads, with the same status.
TEST(TtftBench, RefusesWhatRunAndServeRefuseInTheirWords) {
  const std::string no_model = "/nonexistent/kvc-ttft-bench-test.gguf";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    const char* what;
    std::function<void(TtftBenchOptions&)> bench;
    std::function<void(RunOptions&)> run;
    std::function<void(ServerOptions&)> serve;
  };
  const std::vector<Case> cases = {
      {"unknown codec", [](auto& o) { o.codecs = {"nope"}; }, [](auto& o) { o.codec = "nope"; },
       [](auto& o) { o.codec = "nope"; }},
      {"quality limits", [](auto& o) { o.quality.min_top1 = 2; }, [](auto& o) { o.quality.min_top1 = 2; },
       [](auto& o) { o.quality.min_top1 = 2; }},
      {"link rate", [nan](auto& o) { o.link_gbps = {nan}; }, [nan](auto& o) { o.link_gbps = nan; },
       [nan](auto& o) { o.link_gbps = nan; }},
      {"fetch threads", [](auto& o) { o.fetch_threads = 65; }, [](auto& o) { o.fetch_threads = 65; },
       [](auto& o) { o.fetch_threads = 65; }},
  };
  for (const Case& c : cases) {
    TtftBenchOptions bench = BenchOf(no_model);
    RunOptions run = RunOf(no_model);
    ServerOptions serve = ServeOf(no_model);
    c.bench(bench);
    c.run(run);
    c.serve(serve);
    const Status b = RunTtftBenchJson(bench).status();
    EXPECT_EQ(b.code(), StatusCode::kInvalidArgument) << c.what << ": " << b.ToString();
    EXPECT_EQ(RunJob(run).status().ToString(), b.ToString()) << c.what;
    if (std::string(c.what) == "fetch threads") {
      // The server's fetch threads are its own: 1..64, where the others take 0 for one per core.
      EXPECT_EQ(CompletionServer::Create(serve).status().ToString(),
                InvalidArgument("fetch threads must be in 1..64").ToString());
    } else {
      EXPECT_EQ(CompletionServer::Create(serve).status().ToString(), b.ToString()) << c.what;
    }
  }
}

}  // namespace
}  // namespace kvc
