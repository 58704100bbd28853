// The public API end to end on the test model, through the thin C++ header.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kvcodec/kvcodec.hpp"

namespace {

TEST(CApi, ExtractEncodeDecodeRestore) {
  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto tokens = model.value().Tokenize("In the beginning God created the heaven and the earth.", true);
  ASSERT_TRUE(tokens.ok());
  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 256;
  auto session = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(session.ok()) << session.error().message;
  ASSERT_FALSE(session.value().Eval(tokens.value()).has_value());
  auto kv = session.value().Extract();
  ASSERT_TRUE(kv.ok());
  const kvc_shape shape = kvcodec::Shape(kv.value());
  EXPECT_EQ(shape.n_tokens, tokens.value().size());
  EXPECT_EQ(shape.dtype, KVC_F16);

  const auto fp = model.value().Fingerprint();
  auto bytes = kvcodec::Encode(kv.value(), "quant", "4", "group_size=32", fp);
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;
  auto inspect = kvcodec::InspectJson(bytes.value());
  ASSERT_TRUE(inspect.ok());
  const auto j = nlohmann::json::parse(inspect.value());
  EXPECT_EQ(j["codec"], "quant");
  EXPECT_EQ(j["level"], "4");
  EXPECT_EQ(j["n_tokens"], shape.n_tokens);

  auto decoded = kvcodec::Decode(bytes.value(), &fp);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_FALSE(session.value().Restore(decoded.value()).has_value());

  // The llama.cpp state form round-trips too.
  auto state = kvcodec::KvToLlamaState(kv.value());
  ASSERT_TRUE(state.ok());
  auto back = kvcodec::KvFromLlamaState(state.value(), shape.n_kv_heads);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(kvcodec::Shape(back.value()).n_tokens, shape.n_tokens);
}

TEST(CApi, ErrorsCarryACodeAndAMessage) {
  auto missing = kvcodec::Model::Load("/nonexistent.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, KVC_NOT_FOUND);
  EXPECT_NE(missing.error().message.find("/nonexistent.gguf"), std::string::npos);

  const std::vector<uint8_t> junk = {'n', 'o', 't', ' ', 'k', 'v', 'c'};
  auto decoded = kvcodec::Decode(junk, nullptr);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().code, KVC_CORRUPT);

  auto codecs = kvcodec::CodecsJson();
  ASSERT_TRUE(codecs.ok());
  const auto list = nlohmann::json::parse(codecs.value());
  ASSERT_GE(list.size(), 2u);
  EXPECT_EQ(list[0]["name"], "raw");
}

// A scale benchmark's list and thread counts are checked before any model loads.
TEST(CApi, BenchTtftRefusesBadPrefixLengthsAndThreadCounts) {
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
  kvc_run_params r{};
  r.model_path = KVCODEC_TEST_MODEL;
  r.prompt = "hello";
  r.n_fetch_threads = 65;
  auto run = kvcodec::RunJson(r);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.error().message.find("fetch threads"), std::string::npos);
}

}  // namespace
