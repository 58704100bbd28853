#include "quality/profile_measure.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "llama/model_files.h"

namespace kvc {
namespace {

// kvh32: 4 layers, 2 KV heads of 32, trained at 128 tokens: every rung measured in seconds.
const std::string kModel = std::string(KVCODEC_SOURCE_DIR) + "/models/kvh32/kvh32.gguf";

ProfileOptions Small() {
  ProfileOptions o;
  o.model_path = kModel;
  o.docs = 2;
  o.ctx = 48;
  o.cont = 8;
  o.progress = false;
  o.session.n_threads = 1;
  return o;
}

// `calibrate --token-file` profiles on the end of that same file: a profile measured from token
// ids is the profile of the text they spell, and says which file it was measured on.
TEST(MeasureProfile, FromATokenFileIsTheProfileOfItsText) {
  const std::string text_path = (std::filesystem::path(kModel).parent_path() / "calib.txt").string();
  ProfileOptions from_text = Small();
  from_text.text_path = text_path;
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
  from_tokens.token_path = token_path;
  auto token_profile = MeasureProfile(from_tokens);
  ASSERT_TRUE(token_profile.ok()) << token_profile.status().ToString();

  EXPECT_EQ(token_profile->text, "kvc_profile_tokens.txt, its last windows (held back by calibrate)");
  ASSERT_EQ(token_profile->rungs.size(), text_profile->rungs.size());
  ASSERT_FALSE(token_profile->rungs.empty());
  for (size_t i = 0; i < token_profile->rungs.size(); ++i) {
    const auto& a = text_profile->rungs[i];
    const auto& b = token_profile->rungs[i];
    EXPECT_EQ(b.codec + "/" + b.level, a.codec + "/" + a.level);
    EXPECT_EQ(b.ppl_delta_pct, a.ppl_delta_pct) << b.codec << "/" << b.level;
    EXPECT_EQ(b.top1_agreement, a.top1_agreement) << b.codec << "/" << b.level;
    EXPECT_EQ(b.kl_mean, a.kl_mean) << b.codec << "/" << b.level;
  }
  std::remove(token_path.c_str());
}

}  // namespace
}  // namespace kvc
