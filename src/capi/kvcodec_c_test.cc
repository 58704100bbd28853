// The public API end to end on the test model, through the thin C++ header.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// What a C user needs to check a restored context: its logits, and the tokens it generates.
TEST(CApi, RestoredSessionContinuesWithTheSameLogitsAndTokens) {
  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto tokens = model.value().Tokenize("And the earth was without form, and void; and darkness was", true);
  ASSERT_TRUE(tokens.ok());
  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 128;
  auto original = kvcodec::Session::Create(model.value(), params);
  auto restored = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(original.ok() && restored.ok());
  // No logits before an eval, nor right after a restore.
  EXPECT_EQ(original.value().Logits().error().code, KVC_INVALID_ARGUMENT);

  const std::vector<int32_t> prompt(tokens.value().begin(), tokens.value().end() - 1);
  const std::vector<int32_t> last = {tokens.value().back()};
  ASSERT_FALSE(original.value().Eval(prompt).has_value());
  auto kv = original.value().Extract();
  ASSERT_TRUE(kv.ok());
  ASSERT_FALSE(restored.value().Restore(kv.value()).has_value());
  EXPECT_EQ(restored.value().Logits().error().code, KVC_INVALID_ARGUMENT);
  ASSERT_FALSE(original.value().Eval(last).has_value());
  ASSERT_FALSE(restored.value().Eval(last).has_value());
  auto a = original.value().Logits();
  auto b = restored.value().Logits();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a.value().size(), b.value().size());
  EXPECT_EQ(a.value(), b.value());  // raw KV: bit-identical

  auto greedy_a = kvcodec::Sampler::Create(model.value(), kvcodec::Sampler::Greedy());
  auto greedy_b = kvcodec::Sampler::Create(model.value(), kvcodec::Sampler::Greedy());
  ASSERT_TRUE(greedy_a.ok() && greedy_b.ok());
  std::vector<int32_t> generated;
  for (int step = 0; step < 6; ++step) {
    auto ta = greedy_a.value().Next(original.value());
    auto tb = greedy_b.value().Next(restored.value());
    ASSERT_TRUE(ta.ok() && tb.ok());
    ASSERT_EQ(ta.value(), tb.value()) << "step " << step;
    // Greedy is the arg-max of the logits (the first of equals).
    auto logits = original.value().Logits();
    ASSERT_TRUE(logits.ok());
    const auto& l = logits.value();
    EXPECT_EQ(ta.value(), std::max_element(l.begin(), l.end()) - l.begin());
    generated.push_back(ta.value());
    ASSERT_FALSE(original.value().Eval({ta.value()}).has_value());
    ASSERT_FALSE(restored.value().Eval({tb.value()}).has_value());
  }
  auto text = model.value().Detokenize(generated);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_FALSE(text.value().empty());

  // A seeded sampler repeats its draws; out-of-range settings and tokens are refused.
  kvc_sampler_params hot = kvcodec::Sampler::Greedy();
  hot.temperature = 1.5f;
  hot.has_seed = 1;
  hot.seed = 7;
  auto s1 = kvcodec::Sampler::Create(model.value(), hot);
  auto s2 = kvcodec::Sampler::Create(model.value(), hot);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1.value().Next(original.value()).value(), s2.value().Next(original.value()).value());
  hot.temperature = 3;
  EXPECT_EQ(kvcodec::Sampler::Create(model.value(), hot).error().code, KVC_INVALID_ARGUMENT);
  EXPECT_EQ(model.value().Detokenize({-1}).error().code, KVC_INVALID_ARGUMENT);
  EXPECT_EQ(model.value().Detokenize({1 << 30}).error().code, KVC_INVALID_ARGUMENT);
  EXPECT_FALSE(model.value().IsEndOfGeneration(-5));
}

// The reuse path by hand, as an engine embedding the library would: chunk keys, a store, chunks
// encoded per token range, fetched and decoded onto a fresh session one after another.
TEST(CApi, ChunksThroughAStoreRestoreTheSameContext) {
  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto tokens = model.value().Tokenize(
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
      "darkness was upon the face of the deep.",
      true);
  ASSERT_TRUE(tokens.ok());
  constexpr uint32_t kChunk = 8;
  const std::vector<uint8_t> fp = model.value().Fingerprint();
  const std::vector<int32_t>& t = tokens.value();
  auto keys = kvcodec::ChunkKeys(fp, t, kChunk);
  ASSERT_TRUE(keys.ok()) << keys.error().message;
  ASSERT_EQ(keys.value().size(), t.size() / kChunk);
  ASSERT_GE(keys.value().size(), 2u);
  // A key names its whole prefix: a shorter prompt's keys are the longer one's first keys, and a
  // different first token changes every key.
  const std::vector<int32_t> head(t.begin(), t.begin() + kChunk * 2);
  auto head_keys = kvcodec::ChunkKeys(fp, head, kChunk);
  ASSERT_TRUE(head_keys.ok());
  ASSERT_EQ(head_keys.value().size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(0, std::memcmp(head_keys.value()[i].bytes, keys.value()[i].bytes, 16));
  std::vector<int32_t> other = t;
  other[0] = other[0] == 1 ? 2 : 1;
  auto other_keys = kvcodec::ChunkKeys(fp, other, kChunk);
  ASSERT_TRUE(other_keys.ok());
  EXPECT_NE(0, std::memcmp(other_keys.value().back().bytes, keys.value().back().bytes, 16));

  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 128;
  auto original = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(original.ok());
  const uint32_t n_chunks = static_cast<uint32_t>(keys.value().size());
  const std::vector<int32_t> prefix(t.begin(), t.begin() + n_chunks * kChunk);
  ASSERT_FALSE(original.value().Eval(prefix).has_value());
  auto kv = original.value().Extract();
  ASSERT_TRUE(kv.ok());

  auto store = kvcodec::Store::Open("mem://");
  ASSERT_TRUE(store.ok()) << store.error().message;
  std::vector<std::string> names;
  for (uint32_t i = 0; i < n_chunks; ++i) {
    auto name = kvcodec::ChunkObjectName(keys.value()[i], "raw", "fp16");
    ASSERT_TRUE(name.ok()) << name.error().message;
    auto bytes = kvcodec::Encode(kv.value(), "raw", "", "", fp, i * kChunk, kChunk);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    ASSERT_FALSE(store.value().Put(name.value(), bytes.value()).has_value());
    names.push_back(name.value());
  }

  auto restored = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(restored.ok());
  // Out of order is refused: chunk 1 does not continue an empty sequence.
  auto second = store.value().Get(names[1]);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(restored.value().DecodeAppend(second.value())->code, KVC_INVALID_ARGUMENT);
  for (const std::string& name : names) {
    auto exists = store.value().Exists(name);
    ASSERT_TRUE(exists.ok() && exists.value());
    auto bytes = store.value().Get(name);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    auto error = restored.value().DecodeAppend(bytes.value());
    ASSERT_FALSE(error.has_value()) << error->message;
  }
  const std::vector<int32_t> rest(t.begin() + n_chunks * kChunk, t.end());
  const std::vector<int32_t> next = rest.empty() ? std::vector<int32_t>{t.back()} : rest;
  ASSERT_FALSE(original.value().Eval(next).has_value());
  ASSERT_FALSE(restored.value().Eval(next).has_value());
  auto a = original.value().Logits();
  auto b = restored.value().Logits();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value(), b.value());

  // The store's contract through the C API.
  EXPECT_FALSE(store.value().Delete(names[0]).has_value());
  EXPECT_FALSE(store.value().Delete(names[0]).has_value());  // absent: not an error
  EXPECT_FALSE(store.value().Exists(names[0]).value());
  EXPECT_EQ(store.value().Get(names[0]).error().code, KVC_NOT_FOUND);
  EXPECT_EQ(store.value().Put("no/slashes", {1, 2}).value().code, KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvcodec::Store::Open("ftp://nowhere").error().code, KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvcodec::ChunkObjectName(keys.value()[0], "raw", "a b").error().code, KVC_INVALID_ARGUMENT);
}

// The reuse path in two calls: a first request stores its chunks, a second restores them and
// continues exactly where the first did.
TEST(CApi, ReuseStoresThenRestoresAPrefix) {
  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto tokens = model.value().Tokenize(
      "Now the serpent was more subtil than any beast of the field which the LORD God had made. And he said "
      "unto the woman, Yea, hath God said, Ye shall not eat of every tree of the garden?",
      true);
  ASSERT_TRUE(tokens.ok());
  const std::vector<int32_t>& t = tokens.value();
  kvc_reuse_params reuse;
  kvc_reuse_default_params(&reuse);
  reuse.chunk_tokens = 16;
  reuse.fetch_threads = 1;
  reuse.codec = "quant";
  const uint32_t reusable = static_cast<uint32_t>((t.size() - 1) / reuse.chunk_tokens);
  ASSERT_GE(reusable, 2u);
  auto store = kvcodec::Store::Open("mem://");
  ASSERT_TRUE(store.ok());
  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 256;

  auto first = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(first.ok());
  kvc_reuse_result result;
  ASSERT_EQ(kvc_reuse_restore(first.value().get(), store.value().get(), t.data(), t.size(), &reuse, &result), KVC_OK)
      << kvc_last_error();
  EXPECT_EQ(result.chunks_found, 0u);
  EXPECT_EQ(result.tokens_restored, 0u);
  ASSERT_FALSE(first.value().Eval(t).has_value());
  auto expected = first.value().Logits();
  ASSERT_TRUE(expected.ok());
  uint32_t stored = 0;
  ASSERT_EQ(kvc_reuse_store(first.value().get(), store.value().get(), t.data(), t.size(), 0, &reuse, &stored), KVC_OK)
      << kvc_last_error();
  EXPECT_EQ(stored, reusable);

  auto second = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(kvc_reuse_restore(second.value().get(), store.value().get(), t.data(), t.size(), &reuse, &result), KVC_OK)
      << kvc_last_error();
  EXPECT_EQ(result.chunks_found, reusable);
  EXPECT_EQ(result.chunks_restored, reusable);
  EXPECT_EQ(result.tokens_restored, reusable * reuse.chunk_tokens);
  EXPECT_EQ(result.damaged, 0);
  EXPECT_GT(result.bytes_fetched, 0u);
  const std::vector<int32_t> rest(t.begin() + result.tokens_restored, t.end());
  ASSERT_FALSE(second.value().Eval(rest).has_value());
  auto got = second.value().Logits();
  ASSERT_TRUE(got.ok());
  // Stored rungs are raw fp16 and the quant levels the test model's profile allows; any of them
  // continues with the same greedy token and nearly the same logits.
  const auto& e = expected.value();
  const auto& g = got.value();
  ASSERT_EQ(e.size(), g.size());
  EXPECT_EQ(std::max_element(e.begin(), e.end()) - e.begin(), std::max_element(g.begin(), g.end()) - g.begin());
  float max_diff = 0;
  for (size_t i = 0; i < e.size(); ++i) max_diff = std::max(max_diff, std::abs(e[i] - g[i]));
  EXPECT_LT(max_diff, 0.05f);

  // A session that is not empty is refused; so is storing more chunks than the session holds.
  EXPECT_EQ(kvc_reuse_restore(second.value().get(), store.value().get(), t.data(), t.size(), &reuse, &result),
            KVC_INVALID_ARGUMENT);
  auto empty = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(kvc_reuse_store(empty.value().get(), store.value().get(), t.data(), t.size(), 0, &reuse, &stored),
            KVC_INVALID_ARGUMENT);
  reuse.codec = "nonesuch";
  EXPECT_EQ(kvc_reuse_store(first.value().get(), store.value().get(), t.data(), t.size(), 0, &reuse, &stored),
            KVC_INVALID_ARGUMENT);
}

// Byte-fallback pieces cut in the middle of a character still leave as valid UTF-8.
TEST(CApi, DetokenizedTextIsValidUtf8) {
  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok());
  auto tokens = model.value().Tokenize("caf\xc3\xa9 \xe2\x82\xac", false);
  ASSERT_TRUE(tokens.ok());
  for (size_t n = 0; n <= tokens.value().size(); ++n) {
    const std::vector<int32_t> head(tokens.value().begin(), tokens.value().begin() + static_cast<ptrdiff_t>(n));
    auto text = model.value().Detokenize(head);
    ASSERT_TRUE(text.ok());
    // Every byte sequence is well-formed: no lone continuation bytes, no cut lead bytes.
    const std::string& t = text.value();
    for (size_t i = 0; i < t.size();) {
      const auto c = static_cast<unsigned char>(t[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      ASSERT_NE(len, 0u) << "byte " << i << " of " << n << " tokens";
      ASSERT_LE(i + len, t.size()) << n << " tokens";
      for (size_t k = 1; k < len; ++k) ASSERT_EQ(static_cast<unsigned char>(t[i + k]) >> 6, 2u);
      i += len;
    }
  }
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

// The main job runs from the default parameters with only a model and a prompt given.
TEST(CApi, RunFromDefaultParams) {
  kvc_run_params p;
  kvc_run_default_params(&p);
  p.model_path = KVCODEC_TEST_MODEL;
  p.prompt = "In the beginning God created the heaven and the earth.";
  p.store_url = "mem://";
  p.n_generate = 4;
  p.n_threads = 1;
  auto report = kvcodec::RunJson(p);
  ASSERT_TRUE(report.ok()) << report.error().message;
  const auto j = nlohmann::json::parse(report.value());
  EXPECT_EQ(j["generated_tokens"], 4);
  EXPECT_EQ(j["codec"], "kvtc");
}

// A fetch thread count out of range is refused before any model loads.
TEST(CApi, RunRefusesBadThreadCounts) {
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
