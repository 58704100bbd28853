// The reuse set-up on the test model: the model's calibration, floor and plan, the store's one
// policy, and `run` refusing what the set-up refuses, in its words.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "reuse/prefix_reuse.h"
#include "reuse/reuse_setup.h"
#include "reuse/run_job.h"

namespace kvc {
namespace {

std::filesystem::path Fresh(const std::string& tag) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvc-reuse-setup-test-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir;
}

// The test model alone in a folder: no calibration and no quality profile beside it.
std::string BareModel(const std::string& tag) {
  const auto dir = Fresh(tag);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(KVCODEC_TEST_MODEL, dir / "m.gguf");
  return (dir / "m.gguf").string();
}

std::vector<std::string> Names(const std::vector<StoredRung>& rungs) { return RungNames(rungs); }

TEST(ReuseSetup, LoadsTheModelsCalibrationAndDecidesItsFloorAndPlan) {
  ReuseSetupOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  auto s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_NE(s->model, nullptr);
  EXPECT_NE(s->calibrations->FindForModel(s->model->fingerprint()), nullptr);
  EXPECT_TRUE(s->plan.floor.from_profile()) << s->plan.floor.note;
  // raw first, then kvtc's levels within the floor, as PlanStoredRungs plans them.
  const auto planned = PlanStoredRungs(s->plan.floor, "kvtc");
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(Names(s->plan.rungs), Names(planned->rungs));
  EXPECT_EQ(s->store, nullptr);  // StoreOpening::kNone
  EXPECT_EQ(s->reconnecting_store, nullptr);

  // Levels named are stored exactly as named.
  o.levels = {"16", "8"};
  s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Names(s->plan.rungs), (std::vector<std::string>{"kvtc/16", "kvtc/8"}));
  // No codec: the floor alone.
  o.levels.clear();
  o.codec.clear();
  s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->plan.rungs.empty());
  EXPECT_TRUE(s->plan.floor.from_profile());
  // Neither floor nor plan (a server that never reuses): not even the profile is read.
  o.codec = "quant";
  o.decide_floor = false;
  o.profile = "/nonexistent/profile.kvprof.json";
  s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->plan.rungs.empty());
  EXPECT_TRUE(s->plan.floor.allowed.empty());
}

// Without a calibration, levels of a codec that needs one are refused in one wording, by the
// set-up and by `run`; without levels the floor leaves the codec out and says how to calibrate.
TEST(ReuseSetup, LevelsOfACodecThatNeedsACalibrationNeedOne) {
  const std::string model = BareModel("no-calibration");
  ReuseSetupOptions o;
  o.model_path = model;
  o.levels = {"16"};
  const auto refused = SetUpReuse(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString(), NeedsCalibration("kvtc", model).ToString());
  EXPECT_NE(refused.status().message().find("kvcodec calibrate --model " + model), std::string::npos);

  RunOptions r;
  r.model_path = model;
  r.prompt = "In the beginning God created the heaven and the earth.";
  r.store_url = "mem://";
  r.levels = {"16"};
  r.threads = 1;
  EXPECT_EQ(RunJob(r).status().ToString(), refused.status().ToString());

  o.levels.clear();
  const auto lossless = SetUpReuse(o);
  ASSERT_TRUE(lossless.ok()) << lossless.status().ToString();
  EXPECT_EQ(Names(lossless->plan.rungs), (std::vector<std::string>{"raw/fp16", "planes/lossless"}));
  EXPECT_NE(lossless->plan.floor.note.find("only lossless rungs"), std::string::npos) << lossless->plan.floor.note;

  // Given explicitly, the calibration is loaded from where it is said to be.
  o.levels = {"16"};
  o.calibration = std::filesystem::path(KVCODEC_TEST_MODEL).replace_extension(".kvcal").string();
  const auto calibrated = SetUpReuse(o);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status().ToString();
  EXPECT_EQ(Names(calibrated->plan.rungs), std::vector<std::string>{"kvtc/16"});
  std::filesystem::remove_all(std::filesystem::path(model).parent_path());
}

// The one store policy: a malformed URL is the caller's error; one that cannot be reached is a
// warning and no store, or (a server's) a store that is down and retried.
TEST(ReuseSetup, OpensTheStoreWithOnePolicy) {
  ReuseSetupOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.codec = "raw";
  o.store = StoreOpening::kOnce;
  o.store_url = "mem://";
  auto s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(s->store, nullptr);
  EXPECT_TRUE(s->warnings.empty());

  for (const StoreOpening opening : {StoreOpening::kOnce, StoreOpening::kReconnecting}) {
    o.store = opening;
    o.store_url = "ftp://x";
    EXPECT_EQ(SetUpReuse(o).status().code(), StatusCode::kInvalidArgument);
  }

  const auto file = Fresh("not-a-folder");
  std::ofstream(file) << "a file where the store's folder should be";
  o.store_url = "dir://" + file.string() + "/store";
  o.store = StoreOpening::kOnce;
  s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->store, nullptr);
  ASSERT_EQ(s->warnings.size(), 1u);
  EXPECT_NE(s->warnings[0].find("unavailable"), std::string::npos) << s->warnings[0];
  EXPECT_EQ(s->store_url, "dir://" + file.string() + "/store");

  o.store = StoreOpening::kReconnecting;
  o.reconnect.first_retry = std::chrono::seconds(60);  // no retry while the test runs
  o.reconnect.max_retry = o.reconnect.first_retry;
  s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_NE(s->reconnecting_store, nullptr);
  EXPECT_FALSE(s->reconnecting_store->health().up);
  EXPECT_TRUE(s->warnings.empty());
  s->reconnecting_store.reset();
  std::filesystem::remove(file);

  // The URL reported never carries the password.
  o.store = StoreOpening::kNone;
  o.store_url = "redis://:hunter2@127.0.0.1:1";
  s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->store_url.find("hunter2"), std::string::npos) << s->store_url;
}

// The caller's checks of the model run before the calibration, the floor and the store: a store
// that would be created is not, when the caller refuses.
TEST(ReuseSetup, TheCallersModelChecksComeBeforeTheStore) {
  const auto store = Fresh("untouched-store");
  ReuseSetupOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.store = StoreOpening::kOnce;
  o.store_url = "dir://" + store.string();
  o.profile = "/nonexistent/profile.kvprof.json";  // would be an error, were it read
  bool saw_model = false;
  o.check_model = [&](const LlamaModel& model) {
    saw_model = model.info().n_vocab > 0;
    return InvalidArgument("the prompt is empty");
  };
  const auto s = SetUpReuse(o);
  EXPECT_TRUE(saw_model);
  EXPECT_EQ(s.status().ToString(), InvalidArgument("the prompt is empty").ToString());
  EXPECT_FALSE(std::filesystem::exists(store));
}

// A caller that holds the model and its calibrations (the C API) gets the same floor and plan.
TEST(ReuseSetup, PlanReuseDecidesWhatSetUpReuseDecides) {
  ReuseSetupOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  auto s = SetUpReuse(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  o.model_path.clear();  // the model's own path is used
  auto plan = PlanReuse(*s->model, *s->calibrations, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(Names(plan->rungs), Names(s->plan.rungs));
  EXPECT_EQ(plan->floor.allowed, s->plan.floor.allowed);
  EXPECT_EQ(plan->floor.note, s->plan.floor.note);
  o.fetch_threads = 65;
  EXPECT_EQ(PlanReuse(*s->model, *s->calibrations, o).status().ToString(), CheckReuseOptions(o).ToString());
}

// `run` refuses what the set-up refuses, with the set-up's status, before the model loads.
TEST(ReuseSetup, RunRefusesWhatTheSetUpRefuses) {
  RunOptions r;
  r.model_path = "/nonexistent/model.gguf";
  r.prompt = "hello";
  const std::vector<std::function<void(RunOptions&)>> edits = {
      [](RunOptions& o) { o.codec = "nope"; },
      [](RunOptions& o) { o.chunk_tokens = 0; },
      [](RunOptions& o) { o.link_gbps = std::numeric_limits<double>::quiet_NaN(); },
      [](RunOptions& o) { o.fetch_threads = 65; },
      [](RunOptions& o) { o.quality.min_top1 = 2; },
      [](RunOptions& o) {
        o.codec = "rotquant";
        o.levels = {"5"};
      },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    RunOptions bad = r;
    edits[i](bad);
    const Status expected = CheckReuseOptions(ReuseSetupOptionsOf(bad));
    ASSERT_FALSE(expected.ok()) << i;
    EXPECT_EQ(RunJob(bad).status().ToString(), expected.ToString()) << i;
  }
}

}  // namespace
}  // namespace kvc
