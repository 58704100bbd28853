// The C API under hostile bytes, without a model: every call returns a status (no exception, no
// abort crosses the C boundary), and every error message is one line.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kvcodec/kvcodec.h"

namespace {

// CRC32C (Castagnoli), bitwise: the test builds its files by hand, from docs/format.md, so a
// header the library's own writer would refuse can still be made.
uint32_t Crc32c(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void U16(std::vector<uint8_t>& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void U32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A .kvc with no sections and valid CRCs whose level is `level`: quant (codec id 2), one token.
std::vector<uint8_t> KvcWithLevel(const std::string& level) {
  std::vector<uint8_t> body;
  U16(body, 2);  // codec id
  U16(body, 1);  // codec version
  U32(body, static_cast<uint32_t>(level.size()));
  body.insert(body.end(), level.begin(), level.end());
  U32(body, 0);                                      // codec params
  for (uint32_t v : {1u, 1u, 8u, 1u}) U32(body, v);  // layers, kv heads, head_dim, tokens
  body.push_back(1);                                 // f16
  body.insert(body.end(), 16, 0);                    // model fingerprint
  U32(body, 0);                                      // token_begin
  U32(body, 0);                                      // pos_begin
  U32(body, 0);                                      // sections
  std::vector<uint8_t> file = {'K', 'V', 'C', '1'};
  U32(file, 1);
  U32(file, static_cast<uint32_t>(body.size()));
  file.insert(file.end(), body.begin(), body.end());
  U32(file, Crc32c(file));
  return file;
}

bool OneLine(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) return false;
  }
  return !s.empty();
}

// The symbols a library or object file defines, as nm lists them: (type, mangled name). The
// static symbol table where there is one, else the dynamic one (a stripped shared library).
std::vector<std::pair<char, std::string>> DefinedSymbols(const std::string& path) {
  std::vector<std::pair<char, std::string>> out;
  for (const char* table : {"", "-D "}) {
    const std::string command = std::string("nm --defined-only ") + table + "'" + path + "' 2>/dev/null";
    FILE* nm = popen(command.c_str(), "r");
    if (nm == nullptr) return out;
    char line[4096];
    while (std::fgets(line, sizeof line, nm) != nullptr) {
      std::istringstream fields(line);
      std::string address, type, name;
      if (fields >> address >> type >> name && type.size() == 1) out.emplace_back(type[0], name);
    }
    pclose(nm);
    if (!out.empty()) break;
  }
  return out;
}

// Test-only code stays out of the shipped library: no library libkvcodec.so is linked from
// (kvc_codecs and the rest, listed by CMake), nor the library itself, defines a function of
// kvc_codecs_fuzz_input (the fuzz targets' input layout, once compiled into kvc_codecs).
TEST(CApiHostile, TheLibraryHoldsNoTestOnlyCode) {
  std::set<std::string> test_only;
  for (const auto& [type, name] : DefinedSymbols(KVCODEC_TEST_ONLY_LIBRARY)) {
    if (type == 'T') test_only.insert(name);  // its own functions, not the inline ones it instantiates
  }
  ASSERT_FALSE(test_only.empty()) << "nm found no function in " << KVCODEC_TEST_ONLY_LIBRARY;
  std::ifstream list(KVCODEC_LINKED_LIBRARIES);
  ASSERT_TRUE(list.good()) << KVCODEC_LINKED_LIBRARIES;
  size_t files = 0;
  for (std::string path; std::getline(list, path);) {
    if (path.empty()) continue;
    ++files;
    const auto symbols = DefinedSymbols(path);
    EXPECT_FALSE(symbols.empty()) << "nm read nothing from " << path;
    for (const auto& [type, name] : symbols) EXPECT_EQ(test_only.count(name), 0u) << name << " is in " << path;
  }
  EXPECT_GE(files, 2u);  // the shared library and at least kvc_codecs
}

// The library reports the version project() declares, not a literal of its own.
TEST(CApiHostile, VersionIsTheProjectVersion) {
  EXPECT_STREQ(kvc_version(), KVCODEC_PROJECT_VERSION);
  // The header's macros too: bumping project() without them (or back) fails here.
  EXPECT_STREQ(KVC_VERSION_STRING, KVCODEC_PROJECT_VERSION);
  const std::string from_parts = std::to_string(KVC_VERSION_MAJOR) + "." + std::to_string(KVC_VERSION_MINOR) + "." +
                                 std::to_string(KVC_VERSION_PATCH);
  EXPECT_EQ(from_parts, KVCODEC_PROJECT_VERSION);
}

TEST(CApiHostile, HeaderStringsOutsideTheCharsetAreCorruptOnOneLine) {
  // Before: a level that is not UTF-8 made the JSON library throw through kvc_inspect_json (the
  // CLI aborted); a newline forged a second error line; a NUL cut the message; ESC reached the
  // terminal.
  for (const std::string& level : {std::string("\xFF\xFE"), std::string("8\nkvcodec: error: forged"),
                                   std::string("8\0x", 3), std::string("\x1B[2J")}) {
    const std::vector<uint8_t> file = KvcWithLevel(level);
    char* json = nullptr;
    const kvc_status s = kvc_inspect_json(file.data(), file.size(), &json);
    EXPECT_EQ(s, KVC_CORRUPT) << (json ? json : "");
    if (json != nullptr) kvc_free(json);
    const std::string message = kvc_last_error();
    EXPECT_TRUE(OneLine(message)) << message;
    EXPECT_NE(message.find("level"), std::string::npos) << message;

    kvc_kv* kv = nullptr;
    EXPECT_EQ(kvc_decode(file.data(), file.size(), nullptr, &kv), KVC_CORRUPT);
    EXPECT_TRUE(OneLine(kvc_last_error())) << kvc_last_error();
  }
  // The same file with a level in the charset is well formed.
  const std::vector<uint8_t> good = KvcWithLevel("8");
  char* json = nullptr;
  ASSERT_EQ(kvc_inspect_json(good.data(), good.size(), &json), KVC_OK) << kvc_last_error();
  EXPECT_EQ(nlohmann::json::parse(json)["level"], "8");
  kvc_free(json);
}

TEST(CApiHostile, AnEmptyInputIsCorruptNotANullArgument) {
  // Before: an empty file (a NULL data pointer with size 0) said "data or out_json is NULL".
  char* json = nullptr;
  EXPECT_EQ(kvc_inspect_json(nullptr, 0, &json), KVC_CORRUPT);
  EXPECT_EQ(std::string(kvc_last_error()).find("NULL"), std::string::npos) << kvc_last_error();
  kvc_kv* kv = nullptr;
  EXPECT_EQ(kvc_decode(nullptr, 0, nullptr, &kv), KVC_CORRUPT);
  EXPECT_EQ(kvc_kv_from_llama_state(nullptr, 0, 1, &kv), KVC_CORRUPT);
  // A NULL pointer that claims bytes is still the caller's mistake.
  EXPECT_EQ(kvc_inspect_json(nullptr, 10, &json), KVC_INVALID_ARGUMENT);
}

// The video decoder choice: a name it does not know, or none, is an error that says so and
// changes nothing; "cpu" and "auto" are always accepted.
TEST(CApiHostile, VideoDecoderNamesAreChecked) {
  EXPECT_NE(kvc_set_video_decoder(nullptr), KVC_OK);
  EXPECT_NE(kvc_set_video_decoder("gpu0"), KVC_OK);
  EXPECT_NE(std::string(kvc_last_error()).find("auto, cpu or nvdec"), std::string::npos) << kvc_last_error();
  EXPECT_EQ(kvc_set_video_decoder("cpu"), KVC_OK) << kvc_last_error();
  EXPECT_EQ(kvc_set_video_decoder("auto"), KVC_OK) << kvc_last_error();
}

TEST(CApiHostile, NullHandlesAreHarmless) {
  kvc_shape shape;
  std::memset(&shape, 0xAB, sizeof shape);
  kvc_kv_shape(nullptr, &shape);
  EXPECT_EQ(shape.n_tokens, 0u);
  kvc_kv_shape(nullptr, nullptr);
  uint8_t fp[16];
  kvc_model_fingerprint(nullptr, fp);
  kvc_kv_free(nullptr);
  kvc_model_free(nullptr);
  kvc_session_free(nullptr);
  kvc_server_stop(nullptr);
  kvc_server_free(nullptr);
  EXPECT_EQ(kvc_server_port(nullptr), -1);
  kvc_sampler_free(nullptr);
  kvc_sampler_default_params(nullptr);
  EXPECT_EQ(kvc_model_is_end_of_generation(nullptr, 0), 0);
  const float* logits = nullptr;
  size_t n = 0;
  EXPECT_EQ(kvc_session_logits(nullptr, &logits, &n), KVC_INVALID_ARGUMENT);
  char* text = nullptr;
  EXPECT_EQ(kvc_model_detokenize(nullptr, nullptr, 0, &text), KVC_INVALID_ARGUMENT);
  int32_t token = 0;
  EXPECT_EQ(kvc_sampler_next(nullptr, nullptr, &token), KVC_INVALID_ARGUMENT);
  kvc_store_free(nullptr);
  kvc_store_default_params(nullptr);
  const uint8_t byte = 0;
  EXPECT_EQ(kvc_store_put(nullptr, "a", &byte, 1), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_store_delete(nullptr, "a"), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_session_decode_append(nullptr, &byte, 1), KVC_INVALID_ARGUMENT);
  kvc_chunk_key* keys = nullptr;
  size_t n_keys = 0;
  EXPECT_EQ(kvc_chunk_keys(nullptr, nullptr, 0, 0, &keys, &n_keys), KVC_INVALID_ARGUMENT);
}

// The codec listing agrees with the JSON one and is NULL, never out of bounds, past its ends.
TEST(CApiHostile, CodecListingIsBoundedAndMatchesTheJson) {
  char* json = nullptr;
  ASSERT_EQ(kvc_codecs_json(&json), KVC_OK);
  const auto list = nlohmann::json::parse(json);
  kvc_free(json);
  ASSERT_EQ(kvc_codec_count(), list.size());
  for (size_t i = 0; i < kvc_codec_count(); ++i) {
    const char* name = kvc_codec_name(i);
    ASSERT_NE(name, nullptr);
    EXPECT_EQ(list[i]["name"], name);
    ASSERT_EQ(kvc_codec_level_count(name), list[i]["levels"].size()) << name;
    for (size_t l = 0; l < kvc_codec_level_count(name); ++l) EXPECT_EQ(list[i]["levels"][l], kvc_codec_level(name, l));
    EXPECT_EQ(kvc_codec_level(name, kvc_codec_level_count(name)), nullptr);
    ASSERT_NE(kvc_codec_default_level(name), nullptr);
    ASSERT_NE(kvc_codec_description(name), nullptr);
  }
  EXPECT_EQ(kvc_codec_name(kvc_codec_count()), nullptr);
  EXPECT_EQ(kvc_codec_level_count("nonesuch"), 0u);
  EXPECT_EQ(kvc_codec_level(nullptr, 0), nullptr);
  EXPECT_EQ(kvc_codec_default_level("nonesuch"), nullptr);
  EXPECT_EQ(kvc_codec_needs_calibration("kvtc"), 1);
  EXPECT_EQ(kvc_codec_needs_calibration("raw"), 0);
}

// The parameter structs' defaults are what the command line uses, and each is accepted as it is.
TEST(CApiHostile, DefaultParamsAreTheDocumentedDefaults) {
  kvc_run_params run;
  std::memset(&run, 0xAB, sizeof run);
  kvc_run_default_params(&run);
  EXPECT_STREQ(run.codec, "kvtc");
  EXPECT_EQ(run.chunk_tokens, 256u);
  EXPECT_EQ(run.n_generate, 32u);
  // Sampling: greedy, the same defaults kvc_sampler_default_params gives.
  kvc_sampler_params greedy;
  std::memset(&greedy, 0xAB, sizeof greedy);
  kvc_sampler_default_params(&greedy);
  EXPECT_EQ(greedy.temperature, 0.0f);
  EXPECT_EQ(greedy.top_p, 1.0f);
  EXPECT_EQ(greedy.top_k, 0);
  EXPECT_EQ(greedy.min_p, 0.0f);
  EXPECT_EQ(greedy.has_seed, 0);
  EXPECT_EQ(run.sampling.temperature, greedy.temperature);
  EXPECT_EQ(run.sampling.top_p, greedy.top_p);
  EXPECT_EQ(run.sampling.top_k, greedy.top_k);
  EXPECT_EQ(run.sampling.min_p, greedy.min_p);
  EXPECT_EQ(run.sampling.presence_penalty, greedy.presence_penalty);
  EXPECT_EQ(run.sampling.frequency_penalty, greedy.frequency_penalty);
  EXPECT_EQ(run.sampling.has_seed, greedy.has_seed);
  EXPECT_EQ(run.model_path, nullptr);
  EXPECT_EQ(run.store_url, nullptr);
  kvc_serve_params serve;
  std::memset(&serve, 0xAB, sizeof serve);
  kvc_serve_default_params(&serve);
  EXPECT_STREQ(serve.host, "127.0.0.1");
  EXPECT_EQ(serve.port, 8080);
  EXPECT_EQ(serve.n_parallel, 4);
  EXPECT_EQ(serve.n_fetch_threads, 1);
  EXPECT_STREQ(serve.scheduler, "kv-aware");
  EXPECT_EQ(serve.max_body_bytes, uint64_t{1} << 20);
  EXPECT_EQ(serve.model_path, nullptr);
  kvc_reuse_params reuse;
  kvc_reuse_default_params(&reuse);
  EXPECT_EQ(reuse.chunk_tokens, 256u);
  kvc_run_default_params(nullptr);
  kvc_serve_default_params(nullptr);
  kvc_reuse_default_params(nullptr);
  // Without a model path the defaults are refused with a message, not used blindly.
  char* json = nullptr;
  EXPECT_EQ(kvc_run_json(&run, &json), KVC_INVALID_ARGUMENT);
  kvc_server* server = nullptr;
  EXPECT_EQ(kvc_server_create(&serve, &server), KVC_INVALID_ARGUMENT);
}

// Stores opened through the C API refuse bad names and keep what they are given.
TEST(CApiHostile, StoreRoundTripAndBadNames) {
  kvc_store_params params;
  kvc_store_default_params(&params);
  kvc_store* store = nullptr;
  ASSERT_EQ(kvc_store_open("mem://", &params, &store), KVC_OK) << kvc_last_error();
  const uint8_t data[3] = {1, 2, 3};
  EXPECT_EQ(kvc_store_put(store, "", data, 3), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_store_put(store, "../escape", data, 3), KVC_INVALID_ARGUMENT);
  EXPECT_EQ(kvc_store_put(store, std::string(201, 'a').c_str(), data, 3), KVC_INVALID_ARGUMENT);
  ASSERT_EQ(kvc_store_put(store, "ok.name", data, 3), KVC_OK) << kvc_last_error();
  uint8_t* out = nullptr;
  size_t n = 0;
  ASSERT_EQ(kvc_store_get(store, "ok.name", &out, &n), KVC_OK);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(std::memcmp(out, data, 3), 0);
  kvc_free(out);
  // Chunk keys of fewer tokens than a chunk: none, not an error.
  const uint8_t fp[16] = {};
  const int32_t tokens[3] = {1, 2, 3};
  kvc_chunk_key* keys = nullptr;
  size_t n_keys = 7;
  ASSERT_EQ(kvc_chunk_keys(fp, tokens, 3, 0, &keys, &n_keys), KVC_OK);
  EXPECT_EQ(n_keys, 0u);
  kvc_free(keys);
  kvc_store_free(store);
}

}  // namespace
