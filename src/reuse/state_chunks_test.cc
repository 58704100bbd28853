// State chunks on real llama.cpp models of each memory kind: llama.cpp's own per-architecture
// fixtures (tests/test-llama-archs.cpp, written by scripts/setup-llama.sh).
#include "reuse/state_chunks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "llama/archs_fixtures.h"
#include "store/store.h"

namespace kvc {
namespace {

constexpr uint32_t kChunk = 8;
constexpr uint32_t kChunks = 5;

std::unique_ptr<LlamaSession> NewSession(const LlamaModel& model) {
  SessionOptions options;
  options.n_ctx = 128;
  options.n_batch = 64;
  options.n_threads = 1;
  return LlamaSession::Create(model, options).value();
}

class StateChunks : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    KVC_SKIP_WITHOUT_FIXTURE(GetParam());
    const std::filesystem::path path = archs::Path(GetParam());
    auto model = LlamaModel::Load(path.string());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    std::mt19937 rng(7);
    tokens_.resize(kChunk * kChunks + 1);
    for (int32_t& t : tokens_) t = static_cast<int32_t>(rng() % model_->info().n_vocab);
    keys_ = ChunkKeys(model_->fingerprint(), std::span(tokens_).first(kChunk * kChunks), kChunk);
    store_ = OpenStore("mem://").value();
    // The prompt as a server prefills it: chunk by chunk, each stored at its end.
    live_ = NewSession(*model_);
    for (uint32_t c = 0; c < kChunks; ++c) {
      ASSERT_TRUE(live_->Eval(std::span(tokens_).subspan(c * kChunk, kChunk), false).ok());
      auto chunk = live_->ExtractChunkState(static_cast<int32_t>(c * kChunk), kChunk);
      ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
      ASSERT_TRUE(StoreStateChunk(*store_, keys_[c], c, kChunk, *chunk).ok());
    }
  }

  // Restores what the store holds into a new session, then evaluates the rest of the prompt and
  // one more token there and in a session that prefilled the restored chunks itself: the same
  // logits (the same batches in both, as a batch's size may change the last bits on some models).
  PrefixRestore RestoreAndCompare() {
    auto session = NewSession(*model_);
    auto restored = RestoreStoredStatePrefix(*store_, *session, keys_,
                                             LookupStoredPrefix(*store_, model_->fingerprint(), keys_, {}, kChunk));
    EXPECT_TRUE(restored.ok()) << restored.status().ToString();
    if (!restored.ok()) return {};
    const uint32_t have = restored->chunks_fetched * kChunk;
    EXPECT_EQ(session->next_position(), static_cast<int32_t>(have));
    auto reference = NewSession(*model_);
    for (uint32_t c = 0; c < restored->chunks_fetched; ++c) {
      EXPECT_TRUE(reference->Eval(std::span(tokens_).subspan(c * kChunk, kChunk), false).ok());
    }
    EXPECT_TRUE(session->Eval(std::span(tokens_).subspan(have), false).ok());
    EXPECT_TRUE(reference->Eval(std::span(tokens_).subspan(have), false).ok());
    const auto a = session->LastLogits().value(), b = reference->LastLogits().value();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0) << "logits differ after the restore";
    return *restored;
  }

  std::unique_ptr<LlamaModel> model_;
  std::vector<int32_t> tokens_;
  std::vector<ChunkKey> keys_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<LlamaSession> live_;
};

TEST_P(StateChunks, APrefixRestoresFromTheStoreExactly) {
  const PrefixRestore r = RestoreAndCompare();
  EXPECT_EQ(r.chunks_fetched, kChunks) << r.fallback;
  EXPECT_FALSE(r.damaged);
  EXPECT_GT(r.bytes, 0u);
}

TEST_P(StateChunks, AMissingOrDamagedObjectShortensTheRun) {
  const bool boundaries = model_->info().SnapshotsAtChunkEnds();
  if (boundaries) {
    // The last chunk's snapshot is gone: the run ends a chunk earlier, at that chunk's snapshot.
    ASSERT_TRUE(store_->Delete(ChunkObjectName(keys_[kChunks - 1], kStateChunkCodec, "boundary")).ok());
    const PrefixRestore r = RestoreAndCompare();
    EXPECT_EQ(r.chunks_fetched, kChunks - 1);
    EXPECT_NE(r.fallback.find("boundary object"), std::string::npos) << r.fallback;
    return;
  }
  // Chunk 2's token object is gone: the run ends before it.
  ASSERT_TRUE(store_->Delete(ChunkObjectName(keys_[2], kStateChunkCodec, "tokens")).ok());
  const PrefixRestore r = RestoreAndCompare();
  EXPECT_EQ(r.chunks_fetched, 2u);
  EXPECT_NE(r.fallback.find("chunk 2: token object"), std::string::npos) << r.fallback;
}

// A manifest claiming a state object larger than any may be is damaged: the run ends before its
// chunk, and nothing of that size is read.
TEST_P(StateChunks, AManifestClaimingAHugeObjectEndsTheRunUnread) {
  const ChunkManifest huge{
      .chunk_tokens = kChunk, .chunk_index = 2, .variants = {{kStateChunkCodec, "tokens", uint64_t{1} << 40}}};
  ASSERT_TRUE(store_->Put(ChunkManifestName(keys_[2]), WriteChunkManifest(huge)).ok());
  const PrefixRestore r = RestoreAndCompare();
  EXPECT_EQ(r.chunks_fetched, 2u);
  EXPECT_TRUE(r.damaged);
  EXPECT_NE(r.fallback.find("chunk 2: manifest: a state object of 1099511627776 bytes"), std::string::npos)
      << r.fallback;
}

// An object larger than its own manifest says is damaged, though the batch read's bound (the
// largest listed) let it through.
TEST_P(StateChunks, AnObjectLargerThanItsManifestSaysIsDamaged) {
  const ChunkManifest small{.chunk_tokens = kChunk, .chunk_index = 3, .variants = {{kStateChunkCodec, "tokens", 10}}};
  ASSERT_TRUE(store_->Put(ChunkManifestName(keys_[3]), WriteChunkManifest(small)).ok());
  const PrefixRestore r = RestoreAndCompare();
  EXPECT_EQ(r.chunks_fetched, 3u);
  EXPECT_TRUE(r.damaged);
  EXPECT_NE(r.fallback.find("chunk 3: token object"), std::string::npos) << r.fallback;
}

INSTANTIATE_TEST_SUITE_P(MemoryKinds, StateChunks, ::testing::ValuesIn(archs::OneOfEachMemoryKind()),
                         archs::TestName());

}  // namespace
}  // namespace kvc
