#include "engine/run_job.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/model_files.h"

namespace kvc {
namespace {

std::string Prompt() {
  // ~700 tokens of held-out text: two whole 256-token chunks and a remainder.
  return ReadTextFile(std::filesystem::path(KVCODEC_TEST_MODEL).parent_path() / "eval.txt").value().substr(0, 2600);
}

RunOptions Options(const std::string& store, const std::string& codec) {
  RunOptions o;
  o.model_path = KVCODEC_TEST_MODEL;
  o.prompt = Prompt();
  o.store_url = "dir://" + store;
  o.codec = codec;
  o.n_generate = 12;
  return o;
}

std::string FreshStore(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-run-test-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir.string();
}

// The second request with the same prompt restores the stored prefix and, with a lossless codec,
// generates exactly what recomputing did.
TEST(RunJob, SecondRunReusesTheStoredPrefix) {
  const std::string store = FreshStore("reuse");
  const auto first = RunJob(Options(store, "raw"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->reused_tokens, 0u);
  EXPECT_GE(first->chunks_reusable, 2u);
  EXPECT_EQ(first->chunks_stored, first->chunks_reusable);
  EXPECT_EQ(first->prefilled_tokens, first->prompt_tokens);

  const auto second = RunJob(Options(store, "raw"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->chunks_fetched, first->chunks_reusable);
  EXPECT_EQ(second->reused_tokens, second->chunks_fetched * 256);
  EXPECT_EQ(second->prefilled_tokens, second->prompt_tokens - second->reused_tokens);
  EXPECT_TRUE(second->fallback.empty()) << second->fallback;
  EXPECT_EQ(second->chunks_stored, 0u);
  EXPECT_GT(second->bytes_fetched, 0u);
  EXPECT_EQ(second->text, first->text);
}

// A missing or damaged chunk never produces wrong output: reuse stops there, the rest is
// recomputed, and the report says why.
TEST(RunJob, FallsBackAtAMissingOrCorruptChunk) {
  const std::string store = FreshStore("fallback");
  RunOptions o = Options(store, "quant");
  o.levels = {"8"};
  const auto first = RunJob(o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_GE(first->chunks_stored, 2u);
  // Damage one byte of every stored chunk object (the .kvc CRCs catch it on decode).
  size_t damaged = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::filesystem::path(store) / "objects")) {
    if (!entry.is_regular_file() || entry.path().extension() == ".manifest") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
    ++damaged;
  }
  ASSERT_GE(damaged, 2u);
  const auto second = RunJob(o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->chunks_fetched, 0u);
  EXPECT_NE(second->fallback.find("chunk 0"), std::string::npos) << second->fallback;
  EXPECT_EQ(second->prefilled_tokens, second->prompt_tokens);
  EXPECT_EQ(second->text, first->text);
  // The damaged chunks were stored again, whole: the next request reuses them.
  EXPECT_EQ(second->chunks_stored, first->chunks_stored);
  const auto repaired = RunJob(o);
  ASSERT_TRUE(repaired.ok()) << repaired.status().ToString();
  EXPECT_EQ(repaired->chunks_fetched, first->chunks_stored) << repaired->fallback;
  EXPECT_EQ(repaired->text, first->text);

  // Missing objects behind present manifests: in a fresh store, keep one chunk object and delete
  // the others.
  const std::string store2 = FreshStore("fallback2");
  RunOptions o2 = o;
  o2.store_url = "dir://" + store2;
  ASSERT_TRUE(RunJob(o2).ok());
  size_t removed = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::filesystem::path(store2) / "objects")) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() > 32 && name.substr(33) == "quant.8") {
      if (removed++ > 0) std::filesystem::remove(entry.path());
    }
  }
  const auto third = RunJob(o2);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_LT(third->chunks_fetched, third->chunks_found);
  EXPECT_NE(third->fallback.find("not found"), std::string::npos) << third->fallback;
  EXPECT_EQ(third->text, first->text);
}

TEST(RunJob, ClearErrors) {
  RunOptions o = Options(FreshStore("errors"), "nope");
  EXPECT_EQ(RunJob(o).status().code(), StatusCode::kInvalidArgument);
  o.codec = "raw";
  o.store_url = "ftp://x";
  EXPECT_EQ(RunJob(o).status().code(), StatusCode::kInvalidArgument);
  o.store_url = "mem://";
  o.prompt = "";
  EXPECT_EQ(RunJob(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvc
