#include "quality/profile_measure.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "codecs/codec.h"
#include "llama/model_files.h"

namespace kvc {
namespace {

// kvh32: 4 layers, 2 KV heads of 32, trained at 128 tokens: every rung measured in seconds.
const std::string kModel = std::string(KVCODEC_SOURCE_DIR) + "/models/kvh32/kvh32.gguf";

const std::string kText = (std::filesystem::path(kModel).parent_path() / "calib.txt").string();

ProfileOptions Small() {
  ProfileOptions o;
  o.model_path = kModel;
  o.text_path = kText;
  o.docs = 3;
  o.window = 128;
  o.prefix_lengths = {40, 95};
  o.resamples = 200;
  o.progress = false;
  o.session.n_threads = 1;
  return o;
}

// The default geometry: documents as long as the training context allows (1024 at most), up to
// 16 prefix lengths 32 or more apart, and enough documents for 2048 positions in the first 8
// tokens after them.
TEST(PlanProfile, ScoresWhereReuseBitesOnEnoughPositions) {
  ModelInfo info;
  info.n_ctx_train = 128;  // kvh32
  auto g = PlanProfile(ProfileOptions{}, info);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->window, 128u);
  EXPECT_EQ(g->prefix_lengths, (std::vector<uint32_t>{48, 95}));
  EXPECT_EQ(g->docs, 128u);
  info.n_ctx_train = 1536;  // kvtiny
  g = PlanProfile(ProfileOptions{}, info);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->window, 1024u);
  ASSERT_EQ(g->prefix_lengths.size(), 16u);
  EXPECT_EQ(g->prefix_lengths.front(), 62u);
  EXPECT_EQ(g->prefix_lengths.back(), 991u);
  for (size_t j = 1; j < g->prefix_lengths.size(); ++j) {
    EXPECT_GE(g->prefix_lengths[j], g->prefix_lengths[j - 1] + kProfileWindows.back());
  }
  EXPECT_EQ(g->docs, 16u);
  EXPECT_GE(uint64_t{g->docs} * g->prefix_lengths.size() * kProfileWindows.front(), kProfileMinPositions);
  EXPECT_EQ(g->SourceTokens(true), 16u * 1023);

  struct Case {
    std::function<void(ProfileOptions&)> change;
    const char* message;
  } cases[] = {
      {[](auto& o) { o.window = 96; }, "need at least 97 tokens"},
      {[](auto& o) { o.window = 2048; }, "more than the model's context"},
      {[](auto& o) {
         o.prefix_lengths = {40, 60};
       },
       "at least 32 past the one before"},
      {[](auto& o) {
         o.prefix_lengths = {0, 60};
       },
       "each must be at least 1"},
      {[](auto& o) {
         o.prefix_lengths = {40, 992};
       },
       "the longest must leave 33 tokens of the 1024-token window"},
      {[](auto& o) { o.docs = 1; }, "--docs must be at least 2"},
      {[](auto& o) { o.confidence = 1; }, "--confidence must be in [0.5, 1)"},
  };
  for (const Case& c : cases) {
    ProfileOptions o;
    c.change(o);
    const Status s = PlanProfile(o, info).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
}

// Nothing is read that was not named: no calib.txt beside the model in place of a source; a
// source too short for the documents says what it takes.
TEST(MeasureProfile, ReadsOnlyWhatItIsGiven) {
  ProfileOptions o = Small();
  o.text_path.clear();
  Status s = MeasureProfile(o).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("give --text FILE or --token-file FILE"), std::string::npos) << s.message();
  o = Small();
  o.max_tokens = 300;
  s = MeasureProfile(o).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a profile takes 3 documents of 128 tokens (2 prefix lengths x 8 scored tokens each, "
                             "for 48 positions)"),
            std::string::npos)
      << s.message();
  o = Small();
  o.text_path = "/nonexistent/prompts.txt";
  EXPECT_EQ(MeasureProfile(o).status().code(), StatusCode::kNotFound);
}

// Every rung is scored in the first 8 and the first 32 tokens after each restored prefix, on
// every document: the lossless rungs exactly, the lossy ones with bounds on their bad side.
TEST(MeasureProfile, ScoresEveryRungInBothWindowsWithBounds) {
  auto p = MeasureProfile(Small());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->docs, 3u);
  EXPECT_EQ(p->prefix_lengths, (std::vector<uint32_t>{40, 95}));
  EXPECT_EQ(p->windows, (std::vector<uint32_t>{8, 32}));
  EXPECT_FALSE(p->calibration.empty());  // kvh32.kvcal beside the model: kvtc is measured
  bool saw_kvtc = false, saw_lossy_error = false;
  for (const ProfileRung& r : p->rungs) {
    SCOPED_TRACE(r.codec + "/" + r.level);
    saw_kvtc = saw_kvtc || r.codec == "kvtc";
    ASSERT_EQ(r.windows.size(), 2u);
    for (size_t w = 0; w < 2; ++w) {
      const WindowScore& s = r.windows[w];
      EXPECT_EQ(s.tokens, p->windows[w]);
      EXPECT_EQ(s.positions, 3u * 2 * s.tokens);
      EXPECT_GE(s.ppl_delta_pct_bound, s.ppl_delta_pct);
      EXPECT_LE(s.top1_agreement_bound, s.top1_agreement);
      EXPECT_GE(s.kl_mean_bound, s.kl_mean);
      if (FindCodec(r.codec)->info().lossless) {
        EXPECT_EQ(s.kl_mean_bound, 0);
        EXPECT_EQ(s.top1_agreement_bound, 1);
        EXPECT_EQ(s.ppl_delta_pct_bound, 0);
      } else {
        saw_lossy_error = saw_lossy_error || s.kl_mean > 0;
      }
    }
    EXPECT_GT(r.ratio, 0.9);
  }
  EXPECT_TRUE(saw_kvtc);
  EXPECT_TRUE(saw_lossy_error);
  // The same input gives the same profile, bounds included (the resampling is seeded).
  auto again = MeasureProfile(Small());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(WriteProfile(*again), WriteProfile(*p));
}

// `calibrate --token-file` profiles on the end of that same file: a profile measured from token
// ids is the profile of the text they spell, and says which file it was measured on.
TEST(MeasureProfile, FromATokenFileIsTheProfileOfItsText) {
  const std::string text_path = kText;
  ProfileOptions from_text = Small();
  auto text_profile = MeasureProfile(from_text);
  ASSERT_TRUE(text_profile.ok()) << text_profile.status().ToString();

  auto model = LlamaModel::Load(kModel);
  ASSERT_TRUE(model.ok());
  auto text = ReadTextFile(text_path);
  ASSERT_TRUE(text.ok());
  auto stream = (*model)->Tokenize(*text, false);
  ASSERT_TRUE(stream.ok());
  const std::string token_path = testing::TempDir() + "/kvc_profile_tokens.txt";
  {
    std::ofstream out(token_path);
    for (size_t i = 0; i < stream->size(); ++i) out << (*stream)[i] << (i % 200 == 199 ? "\n" : " ");
    out << "\n";
  }
  ProfileOptions from_tokens = Small();
  from_tokens.text_path.clear();
  from_tokens.token_path = token_path;
  auto token_profile = MeasureProfile(from_tokens);
  ASSERT_TRUE(token_profile.ok()) << token_profile.status().ToString();

  EXPECT_EQ(token_profile->text, "kvc_profile_tokens.txt, its last 3 windows of 128 tokens");
  ASSERT_EQ(token_profile->rungs.size(), text_profile->rungs.size());
  ASSERT_FALSE(token_profile->rungs.empty());
  for (size_t i = 0; i < token_profile->rungs.size(); ++i) {
    const auto& a = text_profile->rungs[i];
    const auto& b = token_profile->rungs[i];
    EXPECT_EQ(b.codec + "/" + b.level, a.codec + "/" + a.level);
    EXPECT_EQ(b.ratio, a.ratio);
    ASSERT_EQ(b.windows.size(), a.windows.size());
    for (size_t w = 0; w < a.windows.size(); ++w) {
      EXPECT_EQ(b.windows[w].ppl_delta_pct, a.windows[w].ppl_delta_pct) << b.codec << "/" << b.level;
      EXPECT_EQ(b.windows[w].top1_agreement_bound, a.windows[w].top1_agreement_bound) << b.codec << "/" << b.level;
      EXPECT_EQ(b.windows[w].kl_mean, a.windows[w].kl_mean) << b.codec << "/" << b.level;
    }
  }
  std::remove(token_path.c_str());
}

}  // namespace
}  // namespace kvc
