// Tests against the committed test model (models/kvtiny): real llama.cpp, real KV.
#include "llama/llama_session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/thread_pool.h"
#include "llama/archs_fixtures.h"
#include "llama/llama_state.h"
#include "llama/token_sampler.h"
#include "reuse/prefix_reuse.h"
#include "store/memory_store.h"

namespace kvc {
namespace {

const LlamaModel& Model() {
  static std::unique_ptr<LlamaModel> model = [] {
    auto m = LlamaModel::Load(KVCODEC_TEST_MODEL);
    if (!m.ok()) {
      ADD_FAILURE() << m.status().ToString();
      std::abort();
    }
    return std::move(m).value();
  }();
  return *model;
}

std::vector<int32_t> SomeTokens(size_t n) {
  std::ifstream in(std::string(KVCODEC_SOURCE_DIR) + "/models/kvtiny/eval.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto tokens = Model().Tokenize(text.substr(0, 20000), true).value();
  tokens.resize(n);
  return tokens;
}

std::unique_ptr<LlamaSession> NewSession(DType cache_type, bool flash_attn, uint32_t n_ctx = 512) {
  SessionOptions options;
  options.n_ctx = n_ctx;
  options.n_batch = 512;
  options.cache_type = cache_type;
  options.flash_attn = flash_attn;
  auto session = LlamaSession::Create(Model(), options);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  return std::move(session).value();
}

// The logits of the last Eval's first n tokens are the same bits in both sessions.
void ExpectSameLogits(const LlamaSession& a, const LlamaSession& b, int n) {
  for (int i = 0; i < n; ++i) {
    const auto la = a.Logits(i), lb = b.Logits(i);
    ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size_bytes()), 0) << "logits differ at continuation token " << i;
  }
}

TEST(LlamaModel, ShapeIsWhatTheTestModelPromises) {
  const ModelInfo& info = Model().info();
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_GE(info.n_layers, 4u);
  EXPECT_LT(info.n_kv_heads, info.n_heads);  // grouped-query attention
  EXPECT_GE(info.head_dim, 64u);
  EXPECT_GE(info.n_ctx_train, 1024u);
  EXPECT_EQ(info.rope.type, RopeType::kNormal);
}

// Every committed model (models/*/model.json): llama.cpp's greedy continuation of the training
// run's prompt is PyTorch's, token for token, so the conversion is faithful for every shape of
// the zoo (head_dim 32 to 128, multi-head and 8:1 grouped-query attention, 2 to 8 layers).
TEST(LlamaModel, EveryModelReproducesPyTorchGreedyOutput) {
  size_t checked = 0;
  for (const auto& dir : std::filesystem::directory_iterator(std::string(KVCODEC_SOURCE_DIR) + "/models")) {
    std::ifstream in(dir.path() / "model.json");
    if (!in) continue;
    const auto meta = nlohmann::json::parse(in);
    const std::string name = meta["name"];
    SCOPED_TRACE(name);
    auto model = LlamaModel::Load((dir.path() / (name + ".gguf")).string());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->info().n_layers, meta["n_layers"].get<uint32_t>());
    EXPECT_EQ((*model)->info().n_kv_heads, meta["n_kv_heads"].get<uint32_t>());
    EXPECT_EQ((*model)->info().head_dim, meta["head_dim"].get<uint32_t>());
    EXPECT_EQ((*model)->info().n_ctx_train, meta["train_ctx"].get<uint32_t>());
    const std::vector<int32_t> expected = meta["greedy_tokens_torch"];
    auto prompt = (*model)->Tokenize(meta["greedy_prompt"].get<std::string>(), true).value();
    ASSERT_LT(prompt.size(), expected.size());
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), expected.begin())) << "tokenizers disagree";
    SessionOptions options;
    options.n_ctx = 64;
    options.cache_type = DType::kF32;
    auto session = LlamaSession::Create(**model, options);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    std::vector<int32_t> out = prompt;
    ASSERT_TRUE((*session)->Eval(prompt, false).ok());
    while (out.size() < expected.size()) {
      const auto logits = (*session)->Logits(-1);
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(next);
      ASSERT_TRUE((*session)->Eval(std::span(&out.back(), 1), false).ok());
    }
    EXPECT_EQ(out, expected);
    ++checked;
  }
  EXPECT_GE(checked, 6u);
}

TEST(LlamaModel, FingerprintIsStableAndMissingModelIsAClearError) {
  auto again = LlamaModel::Load(KVCODEC_TEST_MODEL);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint(), Model().fingerprint());
  auto missing = LlamaModel::Load("/nonexistent/model.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

class RoundTrip : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

// Extract after a prefill, restore into a fresh context: the continuation's logits must be
// bit-identical to the uninterrupted run's.
TEST_P(RoundTrip, RestoredContextGivesBitIdenticalLogits) {
  const auto [cache_type, flash_attn] = GetParam();
  const auto tokens = SomeTokens(300);
  const std::span<const int32_t> prefix(tokens.data(), 280), cont(tokens.data() + 280, 20);

  auto a = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(a->Eval(prefix, false).ok());
  auto kv = a->ExtractKv();
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->dtype(), cache_type);
  EXPECT_EQ(kv->shape().n_tokens, 280u);
  EXPECT_EQ(kv->shape().n_layers, Model().info().n_layers);
  EXPECT_EQ(kv->shape().n_kv_heads, Model().info().n_kv_heads);
  EXPECT_EQ(kv->shape().head_dim, Model().info().head_dim);
  ASSERT_TRUE(a->Eval(cont, true).ok());

  auto b = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(b->RestoreKv(*kv).ok());
  EXPECT_EQ(b->next_position(), 280);
  ASSERT_TRUE(b->Eval(cont, true).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameLogits(*a, *b, 20));
  // And the restored context holds exactly the same KV.
  auto kv_b = b->ExtractKv();
  ASSERT_TRUE(kv_b.ok());
  auto kv_b_prefix = kv_b->View(0, 280).value().Copy().value();
  EXPECT_EQ(kv_b_prefix, *kv);
}

// A prefix appended chunk by chunk as it arrives (uneven chunks too) gives the same logits,
// bit for bit, and the same KV as the prefix restored whole.
TEST_P(RoundTrip, ChunkByChunkRestoreIsBitIdenticalToAWholeRestore) {
  const auto [cache_type, flash_attn] = GetParam();
  const auto tokens = SomeTokens(300);
  const std::span<const int32_t> prefix(tokens.data(), 280), cont(tokens.data() + 280, 20);
  auto a = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(a->Eval(prefix, false).ok());
  const KvCache kv = a->ExtractKv().value();

  auto whole = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(whole->RestoreKv(kv).ok());
  ASSERT_TRUE(whole->Eval(cont, true).ok());

  auto chunked = NewSession(cache_type, flash_attn);
  for (auto [begin, n] : {std::pair{0u, 64u}, {64u, 64u}, {128u, 100u}, {228u, 52u}}) {
    const Status s = chunked->AppendKv(kv.View(begin, n).value());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(chunked->next_position(), 280);
  EXPECT_EQ(chunked->n_cached(), 280u);
  // Out of order, or past the context: refused, and the session is as it was.
  EXPECT_EQ(chunked->AppendKv(kv.View(0, 10).value()).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(chunked->Eval(cont, true).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameLogits(*whole, *chunked, 20));
  EXPECT_EQ(chunked->ExtractKv().value(), whole->ExtractKv().value());
}

// A stored prefix fetched and restored chunk by chunk (RestoreStoredPrefix: chunks decoded on a
// pool through a few reused slots, each appended as it arrives) is the session a whole restore
// of the same decoded chunks gives: the same KV and the same continuation, bit for bit. More
// chunks than slots, so slots are reused; raw (lossless: the prefill's own KV) and quant 8.
TEST_P(RoundTrip, FetchedPrefixRestoredAsChunksArriveIsBitIdenticalToAWholeRestore) {
  const auto [cache_type, flash_attn] = GetParam();
  const auto tokens = SomeTokens(300);
  auto a = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(a->Eval(std::span(tokens).first(280), false).ok());
  const KvCache kv = a->ExtractKv().value();
  constexpr uint32_t kChunk = 32;
  // The chunks the prefill's 280 tokens hold whole: 8 (the pool's 3 workers get 4 slots).
  const std::vector<ChunkKey> keys = ReusableChunkKeys(Model().fingerprint(), std::span(tokens).first(281), kChunk);
  const uint32_t reused = static_cast<uint32_t>(keys.size()) * kChunk;
  ThreadPool pool(3);
  for (const char* codec : {"raw", "quant"}) {
    SCOPED_TRACE(codec);
    const std::string level = codec == std::string("raw") ? "fp16" : "8";
    auto store = MakeMemoryStore({});
    const auto stored =
        StoreChunks(*store, kv.View(), keys, 0, kChunk, *FindCodec(codec), {level}, Model().fingerprint(), {});
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    // The whole restore: every chunk decoded on its own, joined in an fp16 buffer (as the
    // fetcher's), restored at once.
    KvShape shape = kv.shape();
    shape.n_tokens = reused;
    KvCache decoded = KvCache::Create(shape, DType::kF16).value();
    std::vector<float> rows(size_t{kChunk} * shape.row_elems());
    for (uint32_t i = 0; i < keys.size(); ++i) {
      const auto chunk = DecodeKvc(store->Get(ChunkObjectName(keys[i], codec, level)).value()).value();
      for (KvKind kind : kKvKinds) {
        for (uint32_t l = 0; l < shape.n_layers; ++l) {
          chunk.ReadRowsF32(kind, l, 0, kChunk, rows.data());
          decoded.WriteRowsF32(kind, l, i * kChunk, kChunk, rows.data());
        }
      }
    }
    auto whole = NewSession(cache_type, flash_attn);
    ASSERT_TRUE(whole->RestoreKv(decoded).ok());

    auto fetched = NewSession(cache_type, flash_attn);
    LinkShaper link;
    FetchOptions options;
    options.kv_shape = kv.shape();
    options.pool = &pool;
    auto restored = RestoreStoredPrefix(*store, *fetched, Model().fingerprint(), keys, {}, kChunk, {}, link, options);
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    EXPECT_EQ(restored->chunks_fetched, keys.size()) << restored->fallback;
    EXPECT_EQ(fetched->n_cached(), reused);
    EXPECT_EQ(fetched->ExtractKv().value(), whole->ExtractKv().value());
    if (codec == std::string("raw") && kv.dtype() == DType::kF16) {
      EXPECT_EQ(fetched->ExtractKv().value(), kv.View(0, reused).value().Copy().value());
    }
    const auto rest = std::span(tokens).subspan(reused, 20);
    ASSERT_TRUE(whole->Eval(rest, true).ok());
    ASSERT_TRUE(fetched->Eval(rest, true).ok());
    ASSERT_NO_FATAL_FAILURE(ExpectSameLogits(*whole, *fetched, 20));
  }
}

// A token range read through the staging sequence is that slice of the whole extraction, bit for
// bit and at its positions, after a prefill and after appended chunks; reading it leaves the
// session as it was (its KV, and its continuation's logits, bit for bit).
TEST_P(RoundTrip, RangeExtractionIsASliceOfTheWholeExtraction) {
  const auto [cache_type, flash_attn] = GetParam();
  const auto tokens = SomeTokens(300);
  const std::span<const int32_t> prefix(tokens.data(), 280), cont(tokens.data() + 280, 20);
  auto a = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(a->Eval(prefix, false).ok());
  const KvCache whole = a->ExtractKv().value();
  auto appended = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(appended->AppendKv(whole.View(0, 128).value()).ok());
  ASSERT_TRUE(appended->AppendKv(whole.View(128, 152).value()).ok());
  for (LlamaSession* s : {a.get(), appended.get()}) {
    for (auto [begin, n] : {std::pair{0u, 256u}, {256u, 24u}, {100u, 1u}, {279u, 1u}, {37u, 200u}, {0u, 280u}}) {
      auto range = s->ExtractKvRange(static_cast<int32_t>(begin), n);
      ASSERT_TRUE(range.ok()) << range.status().ToString();
      EXPECT_EQ(range->pos_begin(), static_cast<int32_t>(begin));
      EXPECT_EQ(*range, whole.View(begin, n).value().Copy().value()) << "tokens " << begin << " +" << n;
    }
    // Outside the sequence, or empty: refused.
    for (auto [begin, n] : {std::pair{-1, 2u}, {270, 11u}, {280, 1u}, {0, 0u}}) {
      EXPECT_EQ(s->ExtractKvRange(begin, n).status().code(), StatusCode::kInvalidArgument) << begin << " +" << n;
    }
    EXPECT_EQ(s->ExtractKv().value(), whole);
    EXPECT_EQ(s->n_cached(), 280u);
  }
  auto untouched = NewSession(cache_type, flash_attn);
  ASSERT_TRUE(untouched->Eval(prefix, false).ok());
  ASSERT_TRUE(untouched->Eval(cont, true).ok());
  ASSERT_TRUE(a->Eval(cont, true).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameLogits(*untouched, *a, 20));
  // Still a slice after generation, now of the longer sequence.
  EXPECT_EQ(a->ExtractKvRange(0, 256).value(), whole.View(0, 256).value().Copy().value());
  EXPECT_EQ(a->ExtractKvRange(280, 20).value(), a->ExtractKv().value().View(280, 20).value().Copy().value());
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, RoundTrip,
                         ::testing::Combine(::testing::Values(DType::kF16, DType::kF32), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_flash" : "_vtrans");
                         });

// A sequence that does not start at position 0: ranges are by position.
TEST(RoundTrip, RangeExtractionTakesPositions) {
  const auto tokens = SomeTokens(64);
  auto a = NewSession(DType::kF16, false, 2048);
  ASSERT_TRUE(a->SetNextPosition(1000).ok());
  ASSERT_TRUE(a->Eval(tokens, false).ok());
  const KvCache whole = a->ExtractKv().value();
  auto range = a->ExtractKvRange(1010, 20);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(range->pos_begin(), 1010);
  EXPECT_EQ(*range, whole.View(10, 20).value().Copy().value());
  EXPECT_EQ(a->ExtractKvRange(0, 5).status().code(), StatusCode::kInvalidArgument);
  // Only single-sequence sessions have the staging sequence.
  SessionOptions options;
  options.n_ctx = 128;
  options.n_seq = 2;
  auto batched = LlamaSession::Create(Model(), options).value();
  const SeqTokens prefill{0, 0, std::span(tokens)};
  ASSERT_TRUE(batched->DecodeBatch(std::span(&prefill, 1)).ok());
  EXPECT_EQ(batched->ExtractKvRange(0, 8).status().code(), StatusCode::kInvalidArgument);
}

// The attention scratch of a step without flash attention within the cache's size, in powers of
// two from 16 to n_batch.
TEST(BoundedUbatch, KeepsTheAttentionScratchWithinTheCache) {
  SessionOptions options;                                  // n_batch 512, f16
  EXPECT_EQ(BoundedUbatch(Model().info(), options), 64u);  // 4 heads (28 B), 3072 KV bytes a token
  ModelInfo gqa{.n_layers = 8, .n_heads = 8, .n_kv_heads = 1, .head_dim = 32};
  EXPECT_EQ(BoundedUbatch(gqa, options), 16u);  // 52 B against 1024: the floor
  ModelInfo gqa7{.n_layers = 28, .n_heads = 28, .n_kv_heads = 4, .head_dim = 128};
  EXPECT_EQ(BoundedUbatch(gqa7, options), 256u);  // 172 B against 57344
  ModelInfo mha{.n_layers = 32, .n_heads = 8, .n_kv_heads = 8, .head_dim = 128};
  EXPECT_EQ(BoundedUbatch(mha, options), 512u);
  options.cache_type = DType::kF32;  // a larger cache allows a larger step
  EXPECT_EQ(BoundedUbatch(Model().info(), options), 128u);
  options.n_batch = 48;
  EXPECT_EQ(BoundedUbatch(mha, options), 32u);
  options.flash_attn = true;  // no scores held: any step
  EXPECT_EQ(BoundedUbatch(Model().info(), options), 48u);
}

// The step size changes neither the KV nor the logits, bit for bit (a prompt over several
// n_batch calls, each split into many steps).
TEST(BoundedUbatch, SmallStepsGiveTheSameKvAndLogits) {
  const auto tokens = SomeTokens(600);
  SessionOptions options;
  options.n_ctx = 640;
  auto whole = LlamaSession::Create(Model(), options).value();
  options.n_ubatch = BoundedUbatch(Model().info(), options);
  ASSERT_LT(options.n_ubatch, options.n_batch);
  auto stepped = LlamaSession::Create(Model(), options).value();
  ASSERT_TRUE(whole->Eval(tokens, false).ok());
  ASSERT_TRUE(stepped->Eval(tokens, false).ok());
  EXPECT_EQ(stepped->ExtractKv().value(), whole->ExtractKv().value());
  const auto lw = whole->Logits(-1), ls = stepped->Logits(-1);
  EXPECT_EQ(std::memcmp(lw.data(), ls.data(), lw.size_bytes()), 0);
}

TEST(RoundTrip, RestoreConvertsDTypeAndRejectsWrongShapes) {
  const auto tokens = SomeTokens(64);
  auto a = NewSession(DType::kF32, false);
  ASSERT_TRUE(a->Eval(tokens, false).ok());
  auto kv = a->ExtractKv().value();
  auto b = NewSession(DType::kF16, false);
  EXPECT_TRUE(b->RestoreKv(kv).ok());  // f32 -> f16 cache
  auto wrong = KvCache::Create({1, 1, 8, 4}, DType::kF16).value();
  Status s = b->RestoreKv(wrong);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not fit this model"), std::string::npos);
}

// Continuous batching: three sequences in one context — one prefilled, one restored from another
// context's KV, one prefilling while the other two decode in the same batch — give the logits
// each would get alone (up to summation order over the shared cache's cells).
TEST(Batching, SequencesInOneBatchMatchSeparateRuns) {
  const auto tokens = SomeTokens(400);
  const std::span<const int32_t> a(tokens.data(), 100), b(tokens.data() + 100, 120), c(tokens.data() + 220, 60);
  const int32_t next_a = tokens[390], next_b = tokens[391];
  auto alone = [&](std::span<const int32_t> prompt, std::optional<int32_t> next) {
    auto s = NewSession(DType::kF16, false);
    EXPECT_TRUE(s->Eval(prompt, false).ok());
    if (next) {
      EXPECT_TRUE(s->Eval(std::span(&*next, 1), false).ok());
    }
    auto l = s->Logits(-1);
    return std::vector<float>(l.begin(), l.end());
  };
  SessionOptions options;
  options.n_ctx = 512;
  options.n_seq = 3;
  auto batched = LlamaSession::Create(Model(), options).value();
  const SeqTokens prefill_a{0, 0, a};
  ASSERT_TRUE(batched->DecodeBatch(std::span(&prefill_a, 1)).ok());
  auto other = NewSession(DType::kF16, false);
  ASSERT_TRUE(other->Eval(b, false).ok());
  ASSERT_TRUE(batched->RestoreSeqKv(1, other->ExtractKv().value().View()).ok());
  const SeqTokens step[] = {{0, 100, std::span(&next_a, 1)}, {1, 120, std::span(&next_b, 1)}, {2, 0, c}};
  ASSERT_TRUE(batched->DecodeBatch(step).ok());
  const std::vector<float> expected[] = {alone(a, next_a), alone(b, next_b), alone(c, std::nullopt)};
  for (size_t i = 0; i < 3; ++i) {
    const auto got = batched->BatchLogits(i);
    ASSERT_EQ(got.size(), expected[i].size());
    float worst = 0;
    for (size_t v = 0; v < got.size(); ++v) worst = std::max(worst, std::abs(got[v] - expected[i][v]));
    EXPECT_LT(worst, 1e-3f) << "sequence " << i;
    EXPECT_EQ(GreedyToken(got), GreedyToken(expected[i])) << "sequence " << i;
  }
  // Each sequence's KV comes out on its own; clearing one leaves the others.
  EXPECT_EQ(batched->ExtractSeqKv(1).value().shape().n_tokens, 121u);
  batched->ClearSeq(1);
  EXPECT_EQ(batched->ExtractSeqKv(0).value().shape().n_tokens, 101u);
  EXPECT_EQ(batched->ExtractSeqKv(2).value().shape().n_tokens, 60u);
  const SeqTokens bad{3, 0, c};
  EXPECT_EQ(batched->DecodeBatch(std::span(&bad, 1)).code(), StatusCode::kInvalidArgument);
}

// A sequence cut back to its first tokens continues as if only those had been evaluated: what
// a later request sharing only part of a finished one's tokens starts from.
TEST(Batching, TrimmedSequenceContinuesLikeAShorterOne) {
  const auto tokens = SomeTokens(200);
  SessionOptions options;
  options.n_ctx = 256;
  options.n_seq = 2;
  auto batched = LlamaSession::Create(Model(), options).value();
  const std::span<const int32_t> all(tokens), first(tokens.data(), 120);
  const SeqTokens both[] = {{0, 0, all}, {1, 0, first}};
  ASSERT_TRUE(batched->DecodeBatch(both).ok());
  const auto l1 = batched->BatchLogits(1);
  const std::vector<float> shorter(l1.begin(), l1.end());
  ASSERT_TRUE(batched->TrimSeq(0, 119).ok());
  EXPECT_EQ(batched->ExtractSeqKv(0).value().shape().n_tokens, 119u);
  // Token 119 again, at position 119: the logits the 120-token sequence had.
  const int32_t again = tokens[119];
  const SeqTokens step[] = {{0, 119, std::span(&again, 1)}};
  ASSERT_TRUE(batched->DecodeBatch(step).ok());
  const auto got = batched->BatchLogits(0);
  ASSERT_EQ(got.size(), shorter.size());
  float worst = 0;
  for (size_t v = 0; v < got.size(); ++v) worst = std::max(worst, std::abs(got[v] - shorter[v]));
  EXPECT_LT(worst, 1e-3f);
  EXPECT_EQ(GreedyToken(got), GreedyToken(shorter));
  EXPECT_EQ(batched->TrimSeq(2, 0).code(), StatusCode::kInvalidArgument);
}

// Keys in llama.cpp's cache carry RoPE. The same tokens evaluated at positions 0.. and at
// 1000.. have the same pre-RoPE keys (attention depends on relative positions only), so
// undoing our RoPE at each run's positions must bring both to the same vectors: this checks
// our rotation against the one llama.cpp applied.
TEST(Rope, UndoMatchesLlamaCppKeysAtTwoOffsets) {
  const auto tokens = SomeTokens(48);
  auto a = NewSession(DType::kF32, false, 2048);
  ASSERT_TRUE(a->Eval(tokens, false).ok());
  auto b = NewSession(DType::kF32, false, 2048);
  ASSERT_TRUE(b->SetNextPosition(1000).ok());
  ASSERT_TRUE(b->Eval(tokens, false).ok());
  auto ka = a->ExtractKv().value(), kb = b->ExtractKv().value();
  ASSERT_EQ(kb.pos_begin(), 1000);
  const ModelInfo& info = Model().info();
  const size_t n = ka.shape().layer_elems();
  std::vector<float> ra(n), rb(n), reapplied(n);
  double max_diff = 0, max_abs = 0, max_reapply = 0;
  for (uint32_t l = 0; l < info.n_layers; ++l) {
    ka.ReadRowsF32(KvKind::kKey, l, 0, 48, ra.data());
    kb.ReadRowsF32(KvKind::kKey, l, 0, 48, rb.data());
    const std::vector<float> original = rb;
    RotateRows(info.rope, ra.data(), 48, info.n_kv_heads, info.head_dim, 0, true);
    RotateRows(info.rope, rb.data(), 48, info.n_kv_heads, info.head_dim, 1000, true);
    reapplied = rb;
    RotateRows(info.rope, reapplied.data(), 48, info.n_kv_heads, info.head_dim, 1000, false);
    for (size_t i = 0; i < n; ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(ra[i] - rb[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(ra[i])));
      max_reapply = std::max(max_reapply, static_cast<double>(std::fabs(reapplied[i] - original[i])));
    }
  }
  EXPECT_LT(max_diff, 2e-3 * max_abs) << "max |diff| " << max_diff << " of max |k| " << max_abs;
  EXPECT_LT(max_reapply, 1e-4 * max_abs);
  // Without undoing RoPE the two runs' keys differ a lot: the check above is not vacuous.
  ka.ReadRowsF32(KvKind::kKey, 1, 0, 48, ra.data());
  kb.ReadRowsF32(KvKind::kKey, 1, 0, 48, rb.data());
  double raw_diff = 0;
  for (size_t i = 0; i < n; ++i) raw_diff = std::max(raw_diff, static_cast<double>(std::fabs(ra[i] - rb[i])));
  EXPECT_GT(raw_diff, 0.1 * max_abs);
}

// ---- Models without a tokenizer, a BOS or a KV cache: llama.cpp's random-weight fixtures ------

// test-llama-archs writes its GGUFs with tokenizer.ggml.model "no_vocab": no tokenizer, no BOS.

TEST(LlamaModel, TheTestModelHasATokenizerABosAndKeepsKv) {
  EXPECT_TRUE(Model().has_tokenizer());
  EXPECT_TRUE(Model().has_bos());
  EXPECT_TRUE(Model().keeps_kv());
  EXPECT_TRUE(Model().CheckKeepsKv().ok());
}

// llama.cpp aborts the process when asked to tokenize text for such a model or to spell one of
// its tokens; kvcodec refuses the text, naming the model and the way in that works, and spells
// nothing. Token ids still run as given, with no BOS the model does not have.
TEST(LlamaModelWithoutTokenizer, RefusesTextSpellsNothingAndRunsTokenIds) {
  KVC_SKIP_WITHOUT_FIXTURE("llama-dense");
  const std::filesystem::path path = archs::Path("llama-dense");
  auto model = LlamaModel::Load(path.string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const LlamaModel& m = **model;
  EXPECT_FALSE(m.has_tokenizer());
  EXPECT_FALSE(m.has_bos());
  EXPECT_EQ(m.bos_token(), -1);
  EXPECT_TRUE(m.keeps_kv());

  for (const bool add_bos : {true, false}) {
    auto tokens = m.Tokenize("In the beginning", add_bos);
    ASSERT_FALSE(tokens.ok());
    EXPECT_EQ(tokens.status().code(), StatusCode::kUnsupported);
    const std::string message = tokens.status().message();
    EXPECT_NE(message.find("model " + path.string() + " has no tokenizer"), std::string::npos) << message;
    EXPECT_NE(message.find("--token-file"), std::string::npos) << message;
  }
  EXPECT_EQ(m.TokenText(5), "");
  const std::vector<int32_t> ids = {1, 2, 3};
  EXPECT_EQ(m.Detokenize(ids), "");
  EXPECT_FALSE(m.IsEndOfGeneration(0));
  auto named = m.ChatTemplate("chatml");
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(named.status().message().find("has no tokenizer"), std::string::npos) << named.status().ToString();
  auto own = m.ChatTemplate("");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(*own, "");

  SessionOptions options;
  options.n_ctx = 64;
  options.n_batch = 64;
  options.require_kv = true;
  auto session = LlamaSession::Create(m, options);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE((*session)->Eval(ids, false).ok());
  EXPECT_TRUE((*session)->LastLogits().ok());
  auto kv = (*session)->ExtractKv();
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->shape().n_tokens, ids.size());
}

// Diffusion models get no KV memory from llama.cpp: a caller that needs KV is told so by name,
// before and when a context is made, not that the state it reads is corrupt. Without
// require_kv the context is still made (llama.cpp's own state of it is valid, and empty).
TEST(LlamaModelKeepingNoKv, IsRefusedByNameWhereKvIsNeeded) {
  for (const char* name : {"dream-dense", "llada-dense"}) {
    SCOPED_TRACE(name);
    KVC_SKIP_WITHOUT_FIXTURE(name);
    const std::filesystem::path path = archs::Path(name);
    auto model = LlamaModel::Load(path.string());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_FALSE((*model)->keeps_kv());
    const std::string expected = "model " + path.string() + " keeps no KV cache";
    const Status checked = (*model)->CheckKeepsKv();
    EXPECT_EQ(checked.code(), StatusCode::kUnsupported);
    EXPECT_NE(checked.message().find(expected), std::string::npos) << checked.ToString();

    SessionOptions options;
    options.n_ctx = 64;
    options.n_batch = 64;
    options.require_kv = true;
    auto refused = LlamaSession::Create(**model, options);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(refused.status().message().find(expected), std::string::npos) << refused.status().ToString();
    options.require_kv = false;
    EXPECT_TRUE(LlamaSession::Create(**model, options).ok());
  }
}

}  // namespace
}  // namespace kvc
