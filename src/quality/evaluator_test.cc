#include "quality/evaluator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "llama/model_files.h"

namespace kvc {
namespace {

EvalOptions SmallEval(const std::string& codec, const std::string& level) {
  EvalOptions options;
  options.model_path = KVCODEC_TEST_MODEL;
  options.codec = codec;
  options.encode.level = level;
  options.n_docs = 2;
  options.ctx = 256;
  options.cont = 32;
  options.progress = false;
  return options;
}

// The text's tokens as the evaluator reads it: no BOS, one stream.
Result<std::vector<int32_t>> TestModelTokens(const std::string& text_path) {
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(KVCODEC_TEST_MODEL));
  ASSIGN_OR_RETURN(const std::string text, ReadTextFile(text_path));
  return model->Tokenize(text, false);
}

const std::string kEvalText = (std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").string();

// Evaluating `options` scores exactly as `expected` did (the same documents, tokenised or not).
void ExpectTheSameScores(const EvalOptions& options, const EvalReport& expected) {
  auto got = RunEval(options);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ppl_base, expected.ppl_base);
  EXPECT_EQ(got->ppl_codec, expected.ppl_codec);
  EXPECT_EQ(got->top1_agreement, expected.top1_agreement);
  EXPECT_EQ(got->bytes_stored, expected.bytes_stored);
}

TEST(Evaluator, RawCodecIsExact) {
  auto report = RunEval(SmallEval("raw", ""));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->ppl_delta_pct, 0.0);
  EXPECT_EQ(report->top1_agreement, 1.0);
  EXPECT_EQ(report->kl_mean, 0.0);
  EXPECT_GT(report->ppl_base, 1.0);
  EXPECT_NEAR(report->compression_ratio, 1.0, 0.01);
}

TEST(Evaluator, QuantCodecIsCloseAndSmaller) {
  auto report = RunEval(SmallEval("quant", "8"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GE(report->compression_ratio, 1.9);
  EXPECT_LT(std::abs(report->ppl_delta_pct), 2.0);
  EXPECT_GT(report->top1_agreement, 0.9);
  EXPECT_GT(report->kl_mean, 0.0);  // lossy: not bit-identical
}

// The same documents given as token ids score exactly as the text they came from.
TEST(Evaluator, TokenFileScoresLikeItsText) {
  EvalOptions text = SmallEval("quant", "8");
  auto from_text = RunEval(text);
  ASSERT_TRUE(from_text.ok()) << from_text.status().ToString();

  auto stream = TestModelTokens(kEvalText);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const uint32_t body = text.ctx + text.cont;
  const std::string path = testing::TempDir() + "/kvc_eval_tokens.txt";
  {
    std::ofstream out(path);
    for (uint32_t d = 0; d < text.n_docs; ++d) {
      for (uint32_t i = 0; i < body; ++i) out << (i ? " " : "") << (*stream)[size_t{d} * body + i];
      out << "\n";
    }
  }
  EvalOptions tokens = text;
  tokens.token_path = path;
  ExpectTheSameScores(tokens, *from_text);
  std::remove(path.c_str());
}

// The held-back end of a token file (its lines one after another, as calibrate reads it) scores
// exactly as the held-back end of the text the ids came from, however the lines split it.
TEST(Evaluator, TokenFileHeldBackWindowsAreTheTextsHeldBackWindows) {
  EvalOptions text = SmallEval("quant", "8");
  text.text_path = kEvalText;
  text.docs_from_end = true;
  auto from_text = RunEval(text);
  ASSERT_TRUE(from_text.ok()) << from_text.status().ToString();

  auto stream = TestModelTokens(text.text_path);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const std::string path = testing::TempDir() + "/kvc_eval_tokens_from_end.txt";
  {
    std::ofstream out(path);
    for (size_t i = 0; i < stream->size(); ++i) out << (*stream)[i] << (i % 97 == 96 ? "\n" : " ");
    out << "\n";
  }
  EvalOptions tokens = text;
  tokens.text_path.clear();
  tokens.token_path = path;
  ExpectTheSameScores(tokens, *from_text);
  // And they are not the file's first documents: the end is what calibrate did not fit on.
  EvalOptions first = tokens;
  first.docs_from_end = false;
  first.token_path.clear();
  first.text_path = text.text_path;
  auto from_start = RunEval(first);
  ASSERT_TRUE(from_start.ok()) << from_start.status().ToString();
  EXPECT_NE(from_start->ppl_base, from_text->ppl_base);
  std::remove(path.c_str());
}

TEST(Evaluator, JsonHasTheContractFields) {
  EvalReport r;
  r.codec = "raw";
  const auto j = nlohmann::json::parse(EvalReportJson(r));
  for (const char* key :
       {"codec", "level", "n_docs", "ctx", "cont", "bytes_fp16", "bytes_stored", "compression_ratio", "ppl_base",
        "ppl_codec", "ppl_delta_pct", "top1_agreement", "kl_mean", "encode_mb_s", "decode_mb_s"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

TEST(Evaluator, ClearErrors) {
  auto bad_codec = RunEval(SmallEval("nope", ""));
  EXPECT_EQ(bad_codec.status().code(), StatusCode::kInvalidArgument);
  auto opts = SmallEval("raw", "");
  opts.n_docs = 100000;
  auto too_many = RunEval(opts);
  EXPECT_NE(too_many.status().message().find("enough for"), std::string::npos);
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// kvtc with the committed calibration: the accuracy and ratio the issue asks for, on fewer
// documents than docs/results.md (which has the full figures).
TEST(Evaluator, KvtcMeetsItsTargetOnTheTestModel) {
  EvalOptions options = SmallEval("kvtc", "16");
  options.ctx = 1024;
  options.n_docs = 3;
  auto report = RunEval(options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GE(report->compression_ratio, 16.0);
  EXPECT_LE(report->ppl_delta_pct, 1.0);
  EXPECT_GE(report->top1_agreement, 0.95);
}

// The second model (another shape: 4 layers, 1 KV head) goes through the same harness.
TEST(Evaluator, SecondModelRawIsExactAndKvtcCalibrated) {
  const std::string kvmini = std::string(KVCODEC_SOURCE_DIR) + "/models/kvmini/kvmini.gguf";
  EvalOptions options = SmallEval("raw", "");
  options.model_path = kvmini;
  auto raw = RunEval(options);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ(raw->ppl_delta_pct, 0.0);
  EXPECT_EQ(raw->top1_agreement, 1.0);
  options.codec = "kvtc";
  options.encode.level = "16";
  auto kvtc = RunEval(options);
  ASSERT_TRUE(kvtc.ok()) << kvtc.status().ToString();
  EXPECT_GE(kvtc->compression_ratio, 12.0);
}

}  // namespace
}  // namespace kvc
