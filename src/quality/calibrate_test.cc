#include "quality/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "codecs/codec.h"
#include "llama/model_files.h"
#include "quality/profile_measure.h"
#include "transform_coding/calibration_registry.h"
#include "transform_coding/kvcal.h"

namespace kvc {
namespace {

// kvh32: 4 layers, 2 KV heads of 32, trained at 128 tokens, so a calibration takes seconds.
const std::string kModel = std::string(KVCODEC_SOURCE_DIR) + "/models/kvh32/kvh32.gguf";

const std::string kText = std::string(KVCODEC_SOURCE_DIR) + "/models/kvh32/calib.txt";

CalibrateOptions Small() {
  CalibrateOptions o;
  o.model_path = kModel;
  o.text_path = kText;
  o.max_tokens = 6000;
  o.hold_back_for_profile = false;  // the profile's 128 documents would take more than 6000 tokens
  o.grouping = KvtcGrouping::kLayer;
  o.group_size = 16;
  o.ratios = {8, 16};
  o.progress = false;
  return o;
}

TEST(Calibrate, ChoosesTheCandidateWithTheLeastErrorAndMeetsCodedSizes) {
  KvtcCalibration cal;
  auto report = RunCalibrate(Small(), &cal);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->window, 128u);  // the model's training context
  ASSERT_EQ(report->candidates.size(), 2u);
  const auto& a = report->candidates[0];
  const auto& b = report->candidates[1];
  const auto& winner = a.score <= b.score ? a : b;
  EXPECT_EQ(report->quantizer, winner.quantizer);
  EXPECT_EQ(std::string(KvtcQuantizerName(cal.quantizer)), winner.quantizer);
  for (const auto& c : report->candidates) {
    EXPECT_NE(cal.choice.find(c.quantizer + "/layer"), std::string::npos) << cal.choice;
    ASSERT_EQ(c.probe_rel_mse.size(), 3u);
    EXPECT_LT(c.probe_rel_mse[0], c.probe_rel_mse[2]);
  }
  // Every rung's files, as the codec writes them, are within 1.5% of its target ratio.
  ASSERT_EQ(report->rungs.size(), 2u);
  for (const auto& r : report->rungs) {
    EXPECT_NEAR(r.coded_ratio, r.target_ratio, 0.015 * r.target_ratio) << r.target_ratio;
    EXPECT_GT(r.heldout_rel_mse, 0);
  }
  EXPECT_LT(report->rungs[0].heldout_rel_mse, report->rungs[1].heldout_rel_mse);
  EXPECT_EQ(cal.format_version, 2u);
  EXPECT_EQ(cal.allocations.size(), 2u);

  // It is a calibration the codec uses: a prefilled chunk encodes near its ratio and decodes.
  auto bytes = WriteKvcal(cal);
  ASSERT_TRUE(bytes.ok());
  auto reread = ReadKvcal(*bytes);
  ASSERT_TRUE(reread.ok()) << reread.status().ToString();
  auto prefilled = PrefillModelText(kModel, "", 128);
  ASSERT_TRUE(prefilled.ok()) << prefilled.status().ToString();
  CalibrationRegistry registry;
  ASSERT_TRUE(registry.Add(cal).ok());
  const CodecContext context{&registry, &prefilled->model->fingerprint(), nullptr};
  EncodeOptions options;
  options.level = "16";
  options.params["sinks"] = "0";
  auto file = EncodeKvc(*FindCodec("kvtc"), prefilled->kv.View(), options, prefilled->model->fingerprint(), 0, context);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const double fp16_bytes = 2.0 * prefilled->kv.shape().n_tokens * 2 * 4 * 64;
  EXPECT_GT(fp16_bytes / file->size(), 12.0);
  auto decoded = DecodeKvc(*file, &prefilled->model->fingerprint(), context);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
}

TEST(Calibrate, ReportJsonCarriesTheChoice) {
  CalibrateReport r;
  r.quantizer = "component";
  r.choice = "component/layer: because";
  r.candidates.push_back({.quantizer = "component", .grouping = "layer", .group_size = 1, .score = -3});
  const auto j = nlohmann::json::parse(CalibrateReportJson(r));
  EXPECT_EQ(j["choice"], "component/layer: because");
  EXPECT_EQ(j["candidates"][0]["quantizer"], "component");
  EXPECT_TRUE(j.contains("rungs"));
}

// The quality profile calibrate measures next reads the text's last windows: they are held
// back from the fit, or kvtc would be scored on what it was fitted to.
TEST(Calibrate, HoldsBackWhatTheProfileReads) {
  KvtcCalibration cal;
  CalibrateOptions o = Small();
  o.hold_back_for_profile = true;
  Status s = RunCalibrate(o, &cal).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("all held back for the quality profile"), std::string::npos) << s.message();
  // 24000 tokens: 188 windows of 127 (BOS first); the profile reads 128 documents of 127 (kvh32
  // is trained at 128 tokens: 2 prefix lengths x 8 tokens each, for 2048 positions), so the fit
  // has 60 windows where a 20% hold-back would leave it 150.
  o.max_tokens = 24000;
  auto model = LlamaModel::Load(kModel);
  ASSERT_TRUE(model.ok());
  auto profile = PlanProfile(ProfileOptions{}, (*model)->info());
  ASSERT_TRUE(profile.ok());
  EXPECT_EQ(profile->docs, 128u);
  EXPECT_EQ(profile->SourceTokens((*model)->has_bos()), 128u * 127);
  auto held = RunCalibrate(o, &cal);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  o.hold_back_for_profile = false;
  auto not_held = RunCalibrate(o, &cal);
  ASSERT_TRUE(not_held.ok()) << not_held.status().ToString();
  EXPECT_EQ(held->fit_tokens * 150, not_held->fit_tokens * 60);
}

TEST(Calibrate, ClearErrors) {
  KvtcCalibration cal;
  CalibrateOptions o = Small();
  o.text_path.clear();  // nothing beside the model is read in its place
  Status s = RunCalibrate(o, &cal).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("give --text FILE or --token-file FILE"), std::string::npos) << s.message();
  o = Small();
  o.max_tokens = 200;  // under two windows
  EXPECT_NE(RunCalibrate(o, &cal).status().message().find("need at least two windows of 128"), std::string::npos);
  o = Small();
  o.text_path.clear();
  o.token_path = "/nonexistent/tokens.txt";
  EXPECT_EQ(RunCalibrate(o, &cal).status().code(), StatusCode::kNotFound);
  o = Small();
  o.chunk_tokens = 4;
  EXPECT_EQ(RunCalibrate(o, &cal).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvc
