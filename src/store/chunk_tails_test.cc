#include "store/chunk_tails.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "format/container.h"
#include "store/chunk_key.h"

namespace kvc {
namespace {

ChunkTails Sample() {
  return {.chunk_tokens = 16,
          .chunk_index = 2,
          .tails = {{{5, 6, 7}, {{"raw", "fp16", 900}, {"kvtc", "16", 80}}}, {{5, 9}, {{"raw", "fp16", 600}}}}};
}

TEST(ChunkTails, RoundTrips) {
  EXPECT_EQ(ReadChunkTails(WriteChunkTails(Sample())).value(), Sample());
  const ChunkTails empty{.chunk_tokens = 2, .chunk_index = 0, .tails = {}};
  EXPECT_EQ(ReadChunkTails(WriteChunkTails(empty)).value(), empty);
}

TEST(ChunkTails, EveryDamageIsCorrupt) {
  const auto good = WriteChunkTails(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0x40;
    EXPECT_EQ(ReadChunkTails(bad).status().code(), StatusCode::kCorrupt) << "byte " << i;
  }
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ReadChunkTails(std::span(good).first(n)).ok()) << "truncated to " << n;
  }
}

// Lists whose CRC is right but whose tails cannot be: each is refused with its reason.
TEST(ChunkTails, ImpossibleTailsAreCorrupt) {
  auto refused = [](ChunkTails list, const char* why) {
    const auto read = ReadChunkTails(WriteChunkTails(list));
    EXPECT_EQ(read.status().code(), StatusCode::kCorrupt) << why;
    EXPECT_NE(read.status().message().find(why), std::string::npos) << read.status().ToString();
  };
  ChunkTails list = Sample();
  list.tails[0].tokens.assign(16, 1);
  refused(list, "a tail of 16 tokens");
  list.tails[0].tokens.clear();
  refused(list, "a tail of 0 tokens");
  list = Sample();
  list.tails[1].tokens[1] = -3;
  refused(list, "token -3");
  list = Sample();
  while (list.tails.size() <= kMaxChunkTails) list.tails.push_back(list.tails[0]);
  refused(list, "9 tails");
  list = Sample();
  list.chunk_tokens = 1;
  list.tails.clear();
  refused(list, "no room for a tail");
  list = Sample();
  list.tails[0].variants[0].level = "../x";
  refused(list, "variant level");
}

// MaxChunkTailsBytes is the largest list ReadChunkTails reads for its chunk size.
TEST(ChunkTails, TheBoundIsTheLargestList) {
  ChunkTails largest{.chunk_tokens = 32, .chunk_index = 7, .tails = {}};
  ChunkTail tail{std::vector<int32_t>(31, 7), {}};
  for (size_t i = 0; i < kMaxManifestVariants; ++i) {
    tail.variants.push_back({std::string(kMaxLevelNameBytes, 'c'), std::string(kMaxLevelNameBytes, 'l'), ~0ull});
  }
  largest.tails.assign(kMaxChunkTails, tail);
  const std::vector<uint8_t> bytes = WriteChunkTails(largest);
  EXPECT_EQ(bytes.size(), MaxChunkTailsBytes(32));
  EXPECT_TRUE(ReadChunkTails(bytes).ok());
}

TEST(ChunkTails, AddKeepsTheNewestAndDropsWhatANewTailExtends) {
  ChunkTails list{.chunk_tokens = 16, .chunk_index = 0, .tails = {}};
  EXPECT_TRUE(AddChunkTail(list, {{1, 2}, {}}));
  EXPECT_TRUE(AddChunkTail(list, {{3}, {}}));
  // The next turn of the first conversation replaces its earlier turn.
  EXPECT_TRUE(AddChunkTail(list, {{1, 2, 4}, {}}));
  ASSERT_EQ(list.tails.size(), 2u);
  EXPECT_EQ(list.tails[0].tokens, (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(list.tails[1].tokens, (std::vector<int32_t>{3}));
  // A repeat, or a shorter prefix of a stored tail, adds nothing.
  EXPECT_FALSE(AddChunkTail(list, {{1, 2, 4}, {}}));
  EXPECT_FALSE(AddChunkTail(list, {{1, 2}, {}}));
  for (int32_t t = 10; t < 10 + static_cast<int32_t>(kMaxChunkTails); ++t) EXPECT_TRUE(AddChunkTail(list, {{t}, {}}));
  ASSERT_EQ(list.tails.size(), kMaxChunkTails);
  EXPECT_EQ(list.tails.back().tokens, (std::vector<int32_t>{10}));  // {1, 2, 4} and {3}, the oldest, are gone
}

TEST(ChunkTails, BestIsTheLongestAgreement) {
  const ChunkTails list = Sample();
  // The request's tokens agree with all of tail 1 and two tokens of tail 0.
  const std::vector<int32_t> request = {5, 6, 9, 9};
  const auto best = BestChunkTail(list, request);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->index, 0u);
  EXPECT_EQ(best->tokens, 2u);
  EXPECT_EQ(BestChunkTail(list, std::vector<int32_t>{5, 9, 1})->index, 1u);
  // Fewer request tokens than the tail: only as many as the request has.
  EXPECT_EQ(BestChunkTail(list, std::vector<int32_t>{5, 6})->tokens, 2u);
  EXPECT_FALSE(BestChunkTail(list, std::vector<int32_t>{6}).has_value());
  EXPECT_FALSE(BestChunkTail(list, {}).has_value());
}

TEST(ChunkTails, KeysDifferFromWholeChunksAndByPlace) {
  ModelFingerprint model{};
  model[0] = 1;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const auto whole = ChunkKeys(model, tokens, 4);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_NE(ChunkTailKey(model, tokens), whole[0]);
  EXPECT_NE(ChunkTailKey(whole[0], tokens), ChunkTailKey(model, tokens));
  EXPECT_NE(ChunkTailKey(model, std::span(tokens).first(3)), ChunkTailKey(model, tokens));
  EXPECT_EQ(PreviousChunkKey(model, whole, 0), ChunkKey(model));
  EXPECT_EQ(PreviousChunkKey(model, whole, 1), whole[0]);
  EXPECT_EQ(ChunkTailsName(whole[0]), HexString(whole[0]) + ".tails");
}

TEST(ChunkTailsFuzzCorpus, DISABLED_Regenerate) {
  const auto dir = std::filesystem::path(KVCODEC_SOURCE_DIR) / "fuzz" / "corpus" / "chunk_tails";
  std::filesystem::create_directories(dir);
  const auto bytes = WriteChunkTails(Sample());
  std::ofstream(dir / "two_tails", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace
}  // namespace kvc
