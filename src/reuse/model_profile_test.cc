#include "reuse/model_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reuse/profile_test_rungs.h"

namespace kvc {
namespace {

ModelProfile Sample() {
  ModelProfile p;
  for (size_t i = 0; i < p.model.size(); ++i) p.model[i] = static_cast<uint8_t>(i * 17);
  p.calibration = "00112233445566778899aabbccddeeff";
  p.text = "calib.txt";
  SetProfileGeometry(p);
  p.rungs = {
      MeasuredRung("raw", "fp16", 1.0, 0.0, 1.0, 0.0),     MeasuredRung("quant", "8", 1.9, 0.01, 0.999, 0.00001),
      MeasuredRung("kvtc", "16", 15.6, 0.2, 0.99, 0.0003), MeasuredRung("kvtc", "32", 29.0, 0.6, 0.975, 0.001),
      MeasuredRung("kvtc", "64", 55.0, 2.5, 0.93, 0.02),   MeasuredRung("cachegen", "low", 9.0, 1.4, 0.97, 0.004),
      MeasuredRung("video", "4", 6.0, 0.3, 0.96, 0.002),
  };
  return p;
}

TEST(ModelProfile, WriteParseRoundTrip) {
  const ModelProfile p = Sample();
  const std::string text = WriteProfile(p);
  auto read = ParseProfile(text);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->model, p.model);
  EXPECT_EQ(read->calibration, p.calibration);
  ASSERT_EQ(read->rungs.size(), p.rungs.size());
  EXPECT_EQ(read->rungs[3].level, "32");
  EXPECT_EQ(read->rungs[3].ratio, 29.0);
  EXPECT_EQ(WriteProfile(*read), text);
}

TEST(ModelProfile, EditsAndDamageAreRefused) {
  const std::string good = WriteProfile(Sample());
  auto edit = [&](auto&& change) {
    auto j = nlohmann::ordered_json::parse(good);
    change(j);
    return ParseProfile(j.dump(2)).status();
  };
  // Loosening a rung without fixing the checksum is caught.
  Status s = edit([](auto& j) { j["rungs"][4]["windows"][0]["top1_agreement_bound"] = 0.999; });
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  struct Case {
    std::function<void(nlohmann::ordered_json&)> change;
    const char* needle;
  } cases[] = {
      {[](auto& j) { j["format"] = "other"; }, "format is not"},
      {[](auto& j) { j["model_fingerprint"] = "xyz"; }, "model_fingerprint is not 32"},
      {[](auto& j) { j["rungs"][0]["ratio"] = -1; }, "'ratio' is -1"},
      {[](auto& j) { j["rungs"][0]["windows"][1]["top1_agreement"] = 1.5; }, "'top1_agreement' is 1.5"},
      {[](auto& j) { j["rungs"][0]["windows"][0]["kl_mean_bound"] = "x"; }, "'kl_mean_bound' is missing or not"},
      {[](auto& j) { j["rungs"][0]["windows"][0]["tokens"] = 16; }, "windows differ from the profile's"},
      {[](auto& j) { j["rungs"][0]["windows"].erase(1); }, "not an array of one score per window"},
      {[](auto& j) { j["rungs"][0]["windows"][0]["extra"] = 1; }, "not an object of 8 members"},
      {[](auto& j) { j["rungs"][0]["extra"] = 1; }, "not an object of 4 members"},
      {[](auto& j) {
         j["prefix_lengths"] = nlohmann::ordered_json::array({64, 32});
       },
       "not strictly ascending"},
      {[](auto& j) { j["prefix_lengths"] = nlohmann::ordered_json::array(); }, "has 0 entries"},
      {[](auto& j) {
         j["windows"] = nlohmann::ordered_json::array({0, 8});
       },
       "not a whole number in [1, 2^22]"},
      {[](auto& j) { j["confidence"] = 1.5; }, "'confidence' is 1.5"},
      {[](auto& j) { j["rungs"][1]["level"] = "8\n"; }, "outside [A-Za-z0-9._+-]"},
      {[](auto& j) { j["rungs"][1]["codec"] = ""; }, "outside"},
      {[](auto& j) { j["rungs"][2] = j["rungs"][3]; }, "listed twice"},
      {[](auto& j) { j["rungs"] = 5; }, "'rungs' is missing or not an array"},
      {[](auto& j) { j["docs"] = 1.5; }, "'docs' is not a whole number"},
      {[](auto& j) { j["extra"] = 1; }, "unknown fields"},
      {[](auto& j) { j.erase("checksum"); }, "'checksum' is missing"},
  };
  for (const Case& c : cases) {
    s = edit(c.change);
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << c.needle;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
  // A version 1 profile (one 32-token score, no bounds) is not trusted: measured again.
  s = edit([](auto& j) { j["version"] = 1; });
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("measure it again with `kvcodec profile`"), std::string::npos) << s.message();
  for (const char* junk : {"", "{", "[]", "null", "\xff\xfe", "{\"format\": 1}"}) {
    EXPECT_EQ(ParseProfile(junk).status().code(), StatusCode::kCorrupt) << junk;
  }
  EXPECT_EQ(ParseProfile(std::string(kMaxProfileBytes + 1, ' ')).status().code(), StatusCode::kCorrupt);
}

TEST(QualityFloor, OnlyRungsWithinTheLimitsMostAccurateFirst) {
  const ModelProfile p = Sample();
  QualityFloor f = FloorFromProfile(p, {}, p.calibration);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"raw", "fp16"}, {"quant", "8"}, {"kvtc", "16"}, {"kvtc", "32"}};  // cachegen: +1.4% perplexity
  EXPECT_EQ(f.allowed, expected);
  EXPECT_TRUE(f.from_profile());
  EXPECT_EQ(f.Levels("kvtc"), (std::vector<std::string>{"16", "32"}));
  EXPECT_TRUE(f.Levels("video").empty());  // top-1 0.96 < 0.97
  // A stricter user limit.
  f = FloorFromProfile(p, {.max_ppl_delta = 0.5, .min_top1 = 0.98}, p.calibration);
  EXPECT_EQ(f.Levels("kvtc"), (std::vector<std::string>{"16"}));
  // kvtc measured with another calibration than the one loaded: not allowed.
  f = FloorFromProfile(p, {}, "ffffffffffffffffffffffffffffffff");
  EXPECT_TRUE(f.Levels("kvtc").empty());
  EXPECT_EQ(f.allowed.front(), std::make_pair(std::string("raw"), std::string("fp16")));
}

// Where reuse bites: a rung whose figures pass over 32 tokens but not over the first 8 after the
// restored prefix is over the floor, and so is one whose point figures pass where their bound
// does not. The planner's loss is the worst bound on KL.
TEST(QualityFloor, DecidedOnTheBoundsInEveryWindow) {
  ModelProfile p = Sample();
  ProfileRung& kvtc16 = p.rungs[2];
  ASSERT_EQ(kvtc16.level, "16");
  QualityFloor f = FloorFromProfile(p, {}, p.calibration);
  ASSERT_TRUE(f.Allows("kvtc", "16"));
  EXPECT_EQ(f.loss.at({"kvtc", "16"}), 0.0003);
  kvtc16.windows[1].kl_mean_bound = 0.0005;
  EXPECT_EQ(FloorFromProfile(p, {}, p.calibration).loss.at({"kvtc", "16"}), 0.0005);

  kvtc16.windows[0].top1_agreement_bound = 0.965;  // the first 8 tokens: point 0.99, bound under 0.97
  f = FloorFromProfile(p, {}, p.calibration);
  EXPECT_FALSE(f.Allows("kvtc", "16"));
  EXPECT_TRUE(f.Allows("kvtc", "32"));
  kvtc16.windows[0].top1_agreement_bound = 0.99;
  kvtc16.windows[0].ppl_delta_pct_bound = 1.2;  // point +0.2%, bound past +1%
  EXPECT_FALSE(FloorFromProfile(p, {}, p.calibration).Allows("kvtc", "16"));
  kvtc16.windows[0].ppl_delta_pct_bound = 0.9;
  EXPECT_TRUE(FloorFromProfile(p, {}, p.calibration).Allows("kvtc", "16"));
  EXPECT_FALSE(WithinLimits(ProfileRung{.codec = "quant", .level = "8", .ratio = 2, .windows = {}}, {}));
}

TEST(QualityFloor, WithoutAProfileOnlyLosslessRungsAndANote) {
  const std::vector<std::pair<std::string, std::string>> kLossless = {{"raw", "fp16"}, {"planes", "lossless"}};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvc_profile_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "m.gguf").string();
  CalibrationRegistry none;
  ModelProfile p = Sample();
  auto f = LoadQualityFloor(model, "", p.model, none, {});
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->from_profile());
  // Nothing lossy was measured on this model, so nothing lossy is allowed: the lossless rungs alone, however
  // safe quant 8 or rotquant 3 were on other models.
  EXPECT_EQ(f->allowed, kLossless);
  EXPECT_FALSE(f->Allows("quant", "8"));
  EXPECT_FALSE(f->Allows("rotquant", "3"));
  EXPECT_NE(f->note.find("only lossless rungs"), std::string::npos) << f->note;
  EXPECT_NE(f->note.find("kvcodec calibrate --model " + model), std::string::npos) << f->note;
  // The profile beside the model is used; kvtc is left out without the calibration it was measured with.
  ASSERT_TRUE(SaveProfile(p, DefaultProfilePath(model)).ok());
  f = LoadQualityFloor(model, "", p.model, none, {});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->from_profile());
  EXPECT_TRUE(f->Levels("kvtc").empty());
  EXPECT_EQ(f->Levels("quant"), std::vector<std::string>{"8"});
  EXPECT_NE(f->note.find("another calibration"), std::string::npos) << f->note;
  // Another model's profile beside it is skipped; named explicitly it is an error.
  ModelFingerprint other = p.model;
  other[0] ^= 1;
  f = LoadQualityFloor(model, "", other, none, {});
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->from_profile());
  EXPECT_EQ(f->allowed, kLossless);
  EXPECT_EQ(LoadQualityFloor(model, DefaultProfilePath(model), other, none, {}).status().code(),
            StatusCode::kInvalidArgument);
  // A damaged one beside the model is skipped with the reason.
  std::ofstream(DefaultProfilePath(model)) << "{";
  f = LoadQualityFloor(model, "", p.model, none, {});
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->note.find("unusable"), std::string::npos) << f->note;
  EXPECT_EQ(f->allowed, kLossless);
  EXPECT_EQ(LoadQualityFloor(model, "", p.model, none, {.max_ppl_delta = -1}).status().code(),
            StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// A rung's level is 1..64 bytes (docs/format.md), even in a profile whose checksum is right.
TEST(ModelProfile, ALevelOutsideOneTo64BytesIsRefusedNamingTheRung) {
  ModelProfile p = Sample();
  p.rungs[2].level = "";
  Status s = ParseProfile(WriteProfile(p)).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find("rung 2"), std::string::npos) << s.message();
  p = Sample();
  p.rungs[2].level = std::string(65, '1');
  s = ParseProfile(WriteProfile(p)).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
  p.rungs[2].level = std::string(64, '1');
  EXPECT_TRUE(ParseProfile(WriteProfile(p)).ok());
}

}  // namespace
}  // namespace kvc
