#include "llama/chunk_state.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "base/byte_io.h"
#include "llama/chunk_state_test_data.h"

namespace kvc {
namespace {

using test_data::Cells;
using test_data::Snapshot;

// A hybrid memory's chunk: attention cells, then the recurrent state at the chunk's end.
ChunkState HybridChunk(int32_t pos_begin, uint32_t n_tokens) {
  ChunkState c;
  c.pos_begin = pos_begin;
  c.n_tokens = n_tokens;
  c.at_boundary = {false, true};
  c.tokens.sections.push_back(Cells(pos_begin, n_tokens, static_cast<uint32_t>(pos_begin)));
  c.boundary.sections.push_back(Snapshot(pos_begin + static_cast<int32_t>(n_tokens) - 1));
  return c;
}

TEST(ChunkState, StoredObjectsReadBackToTheChunk) {
  const ChunkState chunk = HybridChunk(8, 8);
  auto tokens = WriteChunkTokens(chunk);
  auto boundary = WriteChunkBoundary(chunk);
  ASSERT_TRUE(tokens.ok() && boundary.ok());
  auto read = ReadChunkTokens(*tokens);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(HasBoundary(*read));
  ASSERT_TRUE(ReadChunkBoundary(*boundary, &*read).ok());
  EXPECT_EQ(*read, chunk);
  // Hostile objects: every truncation is an error, never a crash.
  for (size_t cut = 0; cut < tokens->size(); ++cut) {
    EXPECT_FALSE(ReadChunkTokens(std::span(*tokens).first(cut)).ok()) << cut;
  }
  std::vector<uint8_t> other_magic = *tokens;
  other_magic[0] = 'X';
  EXPECT_EQ(ReadChunkTokens(other_magic).status().code(), StatusCode::kCorrupt);
}

TEST(ChunkState, APrefixIsItsChunksCellsAndTheLastSnapshot) {
  const ChunkState a = HybridChunk(0, 4), b = HybridChunk(4, 4);
  auto prefix = ComposePrefixState(std::vector<ChunkState>{a, b});
  ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
  ASSERT_EQ(prefix->sections.size(), 2u);
  const auto& cells = std::get<AttentionSection>(prefix->sections[0]);
  EXPECT_EQ(cells.pos_begin, 0);
  EXPECT_EQ(cells.n_cells, 8u);
  const auto& ka = std::get<AttentionSection>(a.tokens.sections[0]).k[1].rows;
  const auto& kb = std::get<AttentionSection>(b.tokens.sections[0]).k[1].rows;
  std::vector<uint8_t> joined = ka;
  joined.insert(joined.end(), kb.begin(), kb.end());
  EXPECT_EQ(cells.k[1].rows, joined);
  EXPECT_EQ(std::get<RecurrentSection>(prefix->sections[1]), std::get<RecurrentSection>(b.boundary.sections[0]));
  // The result is a state llama.cpp's bytes can carry.
  EXPECT_TRUE(WriteSeqState(*prefix).ok());
}

TEST(ChunkState, ChunksThatDoNotFollowOrDifferAreRefused) {
  EXPECT_EQ(ComposePrefixState(std::vector<ChunkState>{HybridChunk(0, 4), HybridChunk(8, 4)}).status().code(),
            StatusCode::kInvalidArgument);
  ChunkState mla = HybridChunk(4, 4);
  mla.tokens.sections[0] = Cells(4, 4, 1, false);
  EXPECT_EQ(ComposePrefixState(std::vector<ChunkState>{HybridChunk(0, 4), mla}).status().code(),
            StatusCode::kInvalidArgument);
  ChunkState wrong_cells = HybridChunk(0, 4);
  wrong_cells.n_tokens = 3;
  EXPECT_EQ(CheckChunkState(wrong_cells).code(), StatusCode::kInvalidArgument);
  ChunkState recurrent_as_cells = HybridChunk(0, 4);
  recurrent_as_cells.tokens.sections[0] = Snapshot(3);
  EXPECT_EQ(CheckChunkState(recurrent_as_cells).code(), StatusCode::kInvalidArgument);
}

// What a server stores of a finished sequence: its whole state cut into chunks, each with the
// snapshot taken at its end, gives back the chunks the sequence was made of.
TEST(ChunkState, AWholeStateSlicesIntoItsChunks) {
  const ChunkState a = HybridChunk(0, 4), b = HybridChunk(4, 4);
  const SeqState whole = ComposePrefixState(std::vector<ChunkState>{a, b}).value();
  const auto at_boundary = MatchSnapshotSections(whole, b.boundary);
  ASSERT_TRUE(at_boundary.ok()) << at_boundary.status().ToString();
  EXPECT_EQ(*at_boundary, a.at_boundary);
  EXPECT_EQ(SliceChunk(whole, *at_boundary, a.boundary, 0, 4).value(), a);
  EXPECT_EQ(SliceChunk(whole, *at_boundary, b.boundary, 1, 4).value(), b);
  // Past the cells the state holds, or a snapshot of another memory: refused.
  EXPECT_EQ(SliceChunk(whole, *at_boundary, b.boundary, 2, 4).status().code(), StatusCode::kInvalidArgument);
  SeqState other;
  other.sections.push_back(Cells(0, 2, 3));
  other.sections.push_back(Cells(0, 2, 4));
  EXPECT_EQ(MatchSnapshotSections(whole, other).status().code(), StatusCode::kInvalidArgument);
}

// Writes the fuzz corpus (fuzz/corpus/chunk_state): run with --gtest_also_run_disabled_tests
// --gtest_filter=*WriteFuzzCorpus.
TEST(ChunkState, DISABLED_WriteFuzzCorpus) {
  const ChunkState chunk = HybridChunk(8, 8);
  const auto tokens = WriteChunkTokens(chunk).value(), boundary = WriteChunkBoundary(chunk).value();
  std::vector<uint8_t> input = {static_cast<uint8_t>(tokens.size() >> 8), static_cast<uint8_t>(tokens.size())};
  input.insert(input.end(), tokens.begin(), tokens.end());
  input.insert(input.end(), boundary.begin(), boundary.end());
  const std::string path = std::string(KVCODEC_SOURCE_DIR) + "/fuzz/corpus/chunk_state/hybrid";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(input.data(), 1, input.size(), f);
  std::fclose(f);
}

}  // namespace
}  // namespace kvc
