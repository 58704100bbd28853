// The public API end to end on the test model, through the thin C++ header.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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
  // A struct of zeros is greedy decoding (top_p 0 is "off"), as kvc_run_params' sampling is.
  kvc_sampler_params zeros{};
  auto greedy_c = kvcodec::Sampler::Create(model.value(), zeros);
  ASSERT_TRUE(greedy_c.ok()) << greedy_c.error().message;
  auto logits = original.value().Logits();
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(greedy_c.value().Next(original.value()).value(),
            std::max_element(logits.value().begin(), logits.value().end()) - logits.value().begin());
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

// Sampling settings are checked once, by the job, before any model loads.
TEST(CApi, RunRefusesBadSampling) {
  kvc_run_params r;
  kvc_run_default_params(&r);
  r.model_path = KVCODEC_TEST_MODEL;
  r.prompt = "hello";
  r.sampling.temperature = 3;
  auto run = kvcodec::RunJson(r);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.error().message.find("temperature"), std::string::npos) << run.error().message;
  r.sampling.temperature = 1;
  r.sampling.min_p = -1;
  run = kvcodec::RunJson(r);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error().message.find("min_p"), std::string::npos) << run.error().message;
}

// A fetch thread count or link rate out of range is refused (by the job) before any model loads.
TEST(CApi, RunRefusesBadThreadCounts) {
  kvc_run_params r{};
  r.model_path = KVCODEC_TEST_MODEL;
  r.prompt = "hello";
  r.n_fetch_threads = 65;
  auto run = kvcodec::RunJson(r);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.error().message.find("fetch threads"), std::string::npos);
  r.n_fetch_threads = 0;
  r.link_gbps = -1;
  run = kvcodec::RunJson(r);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, KVC_INVALID_ARGUMENT);
  EXPECT_NE(run.error().message.find("link rate"), std::string::npos) << run.error().message;
}

// The JSON schemas kvcodec.h documents, read from the header itself (its "JSON:" paragraph):
// a line ending in `JSON schema "<name>":` opens a block of ` *   "key"  type  meaning` lines
// (meanings wrapped onto lines indented deeper); any other line closes it.
struct DocumentedKey {
  std::string name;
  std::vector<std::string> types;  // string, integer, number, boolean, array, object, null
  bool optional = false;           // "absent" among them
};
using Schemas = std::map<std::string, std::vector<DocumentedKey>>;

Schemas HeaderSchemas() {
  std::ifstream in(KVCODEC_SOURCE_DIR "/include/kvcodec/kvcodec.h");
  EXPECT_TRUE(in.good()) << "cannot read kvcodec.h";
  const std::regex opens(R"re(JSON schema "([a-z_]+)":\s*$)re");
  const std::regex key(R"re(^ \*   "([a-z0-9_]+)" +([a-z|]+)( |$))re");
  const std::regex continuation(R"re(^ \*\s{5,}\S)re");
  const std::set<std::string> kTypes = {"string", "integer", "number", "boolean", "array", "object", "null"};
  Schemas schemas;
  std::vector<DocumentedKey>* open = nullptr;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (open != nullptr) {
      if (std::regex_search(line, m, key)) {
        DocumentedKey k{m[1].str(), {}, false};
        std::stringstream alternatives(m[2].str());
        for (std::string t; std::getline(alternatives, t, '|');) {
          if (t == "absent") {
            k.optional = true;
          } else {
            EXPECT_TRUE(kTypes.count(t)) << "kvcodec.h: key \"" << k.name << "\" has an unknown type '" << t << "'";
            k.types.push_back(t);
          }
        }
        open->push_back(std::move(k));
        continue;
      }
      if (std::regex_search(line, continuation)) continue;
      open = nullptr;
    }
    if (std::regex_search(line, m, opens)) {
      EXPECT_FALSE(schemas.count(m[1].str())) << "kvcodec.h documents JSON schema \"" << m[1] << "\" twice";
      open = &schemas[m[1].str()];
    }
  }
  return schemas;
}

bool HasType(const nlohmann::ordered_json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  return type == "null" && v.is_null();
}

// Holds one JSON object to the header's schema: the keys listed, in their order (an "absent" key
// may be missing), each of a documented type.
class SchemaCheck {
 public:
  SchemaCheck() : schemas_(HeaderSchemas()) {}

  void Expect(const nlohmann::ordered_json& j, const std::string& schema) {
    const auto it = schemas_.find(schema);
    ASSERT_NE(it, schemas_.end()) << "kvcodec.h documents no JSON schema \"" << schema << "\"";
    ASSERT_TRUE(j.is_object()) << schema << ": " << j.dump();
    checked_.insert(schema);
    std::vector<std::string> got, want;
    for (const auto& [name, value] : j.items()) got.push_back(name);
    for (const DocumentedKey& k : it->second) {
      if (!j.contains(k.name)) {
        EXPECT_TRUE(k.optional) << schema << ": the library leaves out \"" << k.name << "\", which kvcodec.h lists";
        continue;
      }
      want.push_back(k.name);
      const auto& v = j.at(k.name);
      EXPECT_TRUE(std::any_of(k.types.begin(), k.types.end(), [&](const std::string& t) { return HasType(v, t); }))
          << schema << ": \"" << k.name << "\" is " << v.type_name() << ", not what kvcodec.h says";
    }
    EXPECT_EQ(got, want) << schema << ": the library's keys (left) differ from those kvcodec.h lists";
  }

  // Every schema the header documents was met by some output.
  void ExpectAllChecked() const {
    std::set<std::string> documented;
    for (const auto& [name, keys] : schemas_) documented.insert(name);
    EXPECT_EQ(checked_, documented) << "a JSON schema kvcodec.h documents was not checked, or one checked is not there";
  }

  size_t size() const { return schemas_.size(); }

 private:
  Schemas schemas_;
  std::set<std::string> checked_;
};

nlohmann::ordered_json Parse(const kvcodec::Outcome<std::string>& json) {
  EXPECT_TRUE(json.ok()) << json.error().message;
  return json.ok() ? nlohmann::ordered_json::parse(json.value()) : nlohmann::ordered_json();
}

void ExpectStateChunk(SchemaCheck& check, const nlohmann::ordered_json& j, const std::string& schema) {
  check.Expect(j, schema);
  for (const auto& section : j["sections"]) {
    if (section.value("kind", "") == "recurrent") {
      check.Expect(section, "state_recurrent_section");
      continue;
    }
    check.Expect(section, "state_attention_section");
    for (const auto& layer : section["layers"]) {
      check.Expect(layer, "state_layer");
      check.Expect(layer["k"], "state_tensor");
      if (!layer["v"].is_null()) check.Expect(layer["v"], "state_tensor");
    }
  }
}

// Every kvc_*_json function on real input gives exactly the keys kvcodec.h documents next to it:
// a key added, removed or renamed on either side fails here.
TEST(CApi, JsonOutputsHaveTheKeysTheHeaderDocuments) {
  SchemaCheck check;
  ASSERT_GE(check.size(), 10u) << "kvcodec.h's JSON schemas were not found";

  auto codecs = Parse(kvcodec::CodecsJson());
  ASSERT_TRUE(codecs.is_array());
  for (const auto& codec : codecs) check.Expect(codec, "codec");

  auto model = kvcodec::Model::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(model.ok()) << model.error().message;
  check.Expect(Parse(model.value().InfoJson()), "model_info");

  // A .kvc file and its sections.
  auto tokens = model.value().Tokenize("In the beginning God created the heaven and the earth.", true);
  ASSERT_TRUE(tokens.ok());
  kvc_session_params params;
  kvc_session_default_params(&params);
  params.n_ctx = 128;
  auto session = kvcodec::Session::Create(model.value(), params);
  ASSERT_TRUE(session.ok());
  ASSERT_FALSE(session.value().Eval(tokens.value()).has_value());
  auto kv = session.value().Extract();
  ASSERT_TRUE(kv.ok());
  auto bytes = kvcodec::Encode(kv.value(), "quant", "8", "", model.value().Fingerprint());
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;
  const auto kvc = Parse(kvcodec::InspectJson(bytes.value()));
  check.Expect(kvc, "inspect_kvc");
  ASSERT_FALSE(kvc["sections"].empty());
  for (const auto& section : kvc["sections"]) check.Expect(section, "inspect_kvc_section");

  // A state chunk (a hybrid model's: attention and recurrent sections) as the chunk_state fuzz
  // seed holds it: a u16 length, the token object, then the boundary object.
  std::ifstream seed(KVCODEC_SOURCE_DIR "/fuzz/corpus/chunk_state/hybrid", std::ios::binary);
  const std::vector<uint8_t> both((std::istreambuf_iterator<char>(seed)), std::istreambuf_iterator<char>());
  ASSERT_GT(both.size(), 2u);
  const size_t split = std::min<size_t>(both.size() - 2, size_t{both[0]} << 8 | both[1]);
  const std::vector<uint8_t> token_object(both.begin() + 2, both.begin() + 2 + static_cast<ptrdiff_t>(split));
  const std::vector<uint8_t> boundary_object(both.begin() + 2 + static_cast<ptrdiff_t>(split), both.end());
  ExpectStateChunk(check, Parse(kvcodec::InspectJson(token_object)), "state_chunk_tokens");
  ExpectStateChunk(check, Parse(kvcodec::InspectJson(boundary_object)), "state_chunk_boundary");

  // The floor from the test model's profile, and the profile in it.
  const auto floor = Parse(kvcodec::QualityFloorJson(KVCODEC_TEST_MODEL, "", "", 0, 0));
  check.Expect(floor, "quality_floor");
  ASSERT_TRUE(floor["profile"].is_object());
  check.Expect(floor["profile"], "quality_profile");
  ASSERT_FALSE(floor["profile"]["rungs"].empty());
  for (const auto& rung : floor["profile"]["rungs"]) {
    check.Expect(rung, "quality_profile_rung");
    for (const auto& window : rung["windows"]) check.Expect(window, "quality_window");
  }

  // The same model with no profile beside it: the lossless floor, as the header says.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvcodec_capi_schema_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string bare = (dir / "bare.gguf").string();
  std::filesystem::create_symlink(KVCODEC_TEST_MODEL, bare);
  const auto lossless = Parse(kvcodec::QualityFloorJson(bare, "", "", 0, 0));
  check.Expect(lossless, "quality_floor");
  EXPECT_EQ(lossless["from_profile"], false);
  EXPECT_TRUE(lossless["profile"].is_null());
  EXPECT_EQ(lossless["allowed"], nlohmann::ordered_json::array({"raw/fp16", "planes/lossless"}));

  // The main job, twice on a store of its own: the second run fetches what the first stored,
  // lossless rungs alone (no profile: the lossless floor, whatever the codec).
  const std::string store = "dir://" + (dir / "store").string();
  kvc_run_params run;
  kvc_run_default_params(&run);
  run.model_path = bare.c_str();
  run.prompt =
      "Now the serpent was more subtil than any beast of the field which the LORD God had made. And he said "
      "unto the woman, Yea, hath God said, Ye shall not eat of every tree of the garden?";
  run.store_url = store.c_str();
  run.chunk_tokens = 16;
  run.n_generate = 2;
  run.n_threads = 1;
  run.n_fetch_threads = 1;
  run.always_fetch = 1;
  const auto first = Parse(kvcodec::RunJson(run));
  check.Expect(first, "run_report");
  EXPECT_EQ(first["stored_levels"], nlohmann::ordered_json::array({"raw/fp16", "planes/lossless"}));
  EXPECT_GT(first["chunks_stored"].get<int>(), 0);
  const auto second = Parse(kvcodec::RunJson(run));
  check.Expect(second, "run_report");
  EXPECT_EQ(second["chunks_fetched"], first["chunks_stored"]);
  ASSERT_FALSE(second["variants"].empty());
  for (const auto& v : second["variants"]) EXPECT_TRUE(v == "raw/fp16" || v == "planes/lossless") << v;
  EXPECT_EQ(second["text"], first["text"]);
  std::filesystem::remove_all(dir);

  check.ExpectAllChecked();
}

}  // namespace
