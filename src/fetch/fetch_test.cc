#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <thread>

#include "base/thread_pool.h"
#include "fetch/fetcher.h"
#include "fetch/read_buffers.h"
#include "libav/video_decoder.h"
#include "store/chunk_manifest.h"
#include "store/memory_store.h"
#include "store/store_contract.h"
#include "tensor/synthetic_kv.h"

namespace kvc {
namespace {

constexpr ModelFingerprint kFp{9, 9, 9};
const KvShape kChunkShape{.n_layers = 2, .n_kv_heads = 2, .head_dim = 32, .n_tokens = 64};

TEST(LinkShaper, CapsConcurrentTransfersToTheRate) {
  LinkShaper link(1e6);  // 1 MB/s
  const auto start = SteadyClock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { link.Acquire(25'000); });
  for (auto& t : threads) t.join();
  // 100 KB shared by four transfers at 1 MB/s: at least 0.1 s, whatever the scheduling.
  EXPECT_GE(SecondsSince(start), 0.099);
  LinkShaper open_link(0);
  const auto t0 = SteadyClock::now();
  open_link.Acquire(1'000'000'000);
  EXPECT_LT(SecondsSince(t0), 0.05) << "an uncapped link must not wait";
}

TEST(BandwidthEstimator, CountsTheTimeTheLinkWasBusy) {
  BandwidthEstimator est(123.0, 2);
  EXPECT_EQ(est.BytesPerSecond(), 123.0);
  const auto t = SteadyClock::now();
  using ms = std::chrono::milliseconds;
  est.Add(1000, t, t + ms(100));
  est.Add(1000, t + ms(50), t + ms(200));
  EXPECT_NEAR(est.BytesPerSecond(), 2000 / 0.2, 1e-6);
  est.Add(5000, t + ms(200), t + ms(300));  // the window keeps the last two
  EXPECT_NEAR(est.BytesPerSecond(), 6000 / 0.25, 1e-6);
  // Idle time between transfers is not link time.
  est.Add(1000, t + ms(900), t + ms(950));
  EXPECT_NEAR(est.BytesPerSecond(), 6000 / 0.15, 1e-6);
}

ChunkManifest Manifest(std::vector<ChunkVariant> v) {
  return {.chunk_tokens = 64, .chunk_index = 0, .variants = std::move(v)};
}

TEST(LevelPlanner, TradesTransferAgainstDecode) {
  const ChunkManifest m = Manifest({{"raw", "fp16", 100'000}, {"kvtc", "16", 5'000}});
  LevelPlanner planner({}, 1, 0);
  planner.ObserveDecode({"raw", "fp16", 0}, 0.001, 64);
  planner.ObserveDecode({"kvtc", "16", 0}, 0.010, 64);
  // Fast link: kvtc's decode (10 ms) costs more than raw's transfer (0.1 ms).
  EXPECT_EQ(planner.Choose(m, 1e9)->variant.codec, "raw");
  // Slow link: raw's transfer (100 ms) costs more than kvtc's decode.
  EXPECT_EQ(planner.Choose(m, 1e6)->variant.codec, "kvtc");
  // Two decoders halve what decode costs per chunk.
  LevelPlanner two({}, 2, 0);
  two.ObserveDecode({"kvtc", "16", 0}, 0.010, 64);
  EXPECT_NEAR(two.Choose(Manifest({{"kvtc", "16", 5'000}}), 1e9)->predicted_s, 0.005, 1e-9);
}

TEST(LevelPlanner, RespectsTheQualityFloorAndRecomputes) {
  const ChunkManifest m = Manifest({{"raw", "fp16", 100'000}, {"kvtc", "64", 1'000}});
  LevelPlanner floor({{"raw", "fp16"}}, 1, 0);
  EXPECT_EQ(floor.Choose(m, 1e6)->variant.level, "fp16") << "kvtc 64 is below the floor";
  EXPECT_FALSE(LevelPlanner({{"quant", "8"}}, 1, 0).Choose(m, 1e6).has_value());
  LevelPlanner recompute({{"raw", "fp16"}}, 1, 0.02);
  EXPECT_TRUE(recompute.Choose(m, 1e6)->recompute) << "100 ms transfer vs 20 ms prefill";
  EXPECT_FALSE(recompute.Choose(m, 1e9)->recompute);
}

// A tail (a chunk shorter than the rest) is priced by its length: decode times are learnt per
// token, and a recompute costs its share of a whole chunk's.
TEST(LevelPlanner, ATailIsPricedByItsLength) {
  LevelPlanner planner({}, 1, 0.064, 64);
  planner.ObserveDecode({"raw", "fp16", 0}, 0.0064, 64);  // 0.1 ms a token
  ChunkManifest tail{.chunk_tokens = 16, .chunk_index = 3, .variants = {{"raw", "fp16", 16'000}}};
  const auto fetched = planner.Choose(tail, 1e12);
  ASSERT_TRUE(fetched.has_value());
  EXPECT_FALSE(fetched->recompute);
  EXPECT_NEAR(fetched->predicted_s, 0.0016, 1e-9);
  // At 1 MB/s its 17 kB take 17 ms; its prefill, a quarter of a whole chunk's 64 ms, 16 ms.
  tail.variants[0].bytes = 17'000;
  const auto recomputed = planner.Choose(tail, 1e6);
  ASSERT_TRUE(recomputed.has_value());
  EXPECT_TRUE(recomputed->recompute);
  EXPECT_NEAR(recomputed->predicted_s, 0.016, 1e-9);
}

TEST(LevelPlanner, QualityFirstWithinTheMarginBandwidthFirstBeyondIt) {
  using Rung = LevelPlanner::Rung;
  const std::map<Rung, double> loss = {
      {{"quant", "8"}, 1e-6}, {{"kvtc", "8"}, 1e-4}, {{"kvtc", "16"}, 3e-4}, {{"kvtc", "32"}, 1e-3}};
  // 64 tokens of 1000 bytes of fp16 KV each: raw is 64 kB.
  const ChunkManifest m = Manifest({{"raw", "fp16", 64'000},
                                    {"quant", "8", 33'000},
                                    {"kvtc", "8", 8'000},
                                    {"kvtc", "16", 4'000},
                                    {"kvtc", "32", 2'000}});
  LevelPlanner planner({}, 1, 0, 0, loss, 1000);
  // Nothing seen yet: every decode is priced alike, so on a fast link they tie and raw (exact) wins.
  EXPECT_EQ(planner.Choose(m, 1e12)->variant.codec, "raw");
  // Decodes seen: raw 1.0 ms, quant 1.02 ms, kvtc 1.5-1.6 ms. Uncapped, raw is fastest and exact.
  planner.ObserveDecode({"raw", "fp16", 0}, 0.0010, 64);
  planner.ObserveDecode({"quant", "8", 0}, 0.00102, 64);
  planner.ObserveDecode({"kvtc", "8", 0}, 0.0016, 64);
  planner.ObserveDecode({"kvtc", "16", 0}, 0.0015, 64);
  planner.ObserveDecode({"kvtc", "32", 0}, 0.0015, 64);
  EXPECT_EQ(planner.Choose(m, 1e12)->variant.codec, "raw");
  // At 40 MB/s raw takes 1.6 ms and quant 8 0.83 ms (decode 1.02): quant is fastest; kvtc (1.5 ms) is
  // not within 5% of it.
  EXPECT_EQ(planner.Choose(m, 40e6)->variant.codec, "quant");
  // At 1 MB/s transfer decides: kvtc 32 (2 ms) is fastest and kvtc 16 (4 ms) far off: the trade is real.
  auto slow = planner.Choose(m, 1e6);
  EXPECT_EQ(slow->variant.codec + "/" + slow->variant.level, "kvtc/32");
  // When the two highest rungs are within 5%, the more accurate one is fetched.
  const ChunkManifest close = Manifest({{"kvtc", "16", 2'050}, {"kvtc", "32", 2'000}});
  auto near = planner.Choose(close, 1e6);
  EXPECT_EQ(near->variant.level, "16");
  // A rung not decoded yet is tried only when its guess is twice as fast as every measured one:
  // raw read at 200 MB/s (0.32 ms) is not traded for an unseen kvtc (guessed 0.64 ms of decode).
  LevelPlanner guess({}, 1, 0, 0, loss, 1000);
  guess.ObserveDecode({"raw", "fp16", 0}, 0.0001, 64);
  EXPECT_EQ(guess.Choose(m, 200e6)->variant.codec, "raw");
  // At 20 MB/s raw takes 3.2 ms: the unseen rungs' guess (0.64 ms) is worth trying.
  EXPECT_EQ(guess.Choose(m, 20e6)->variant.codec, "kvtc");
  // A floor without the high rungs never fetches them, however slow the link.
  LevelPlanner floor({{"raw", "fp16"}, {"quant", "8"}, {"kvtc", "8"}}, 1, 0, 0, loss, 1000);
  for (double bps : {1e3, 1e6, 1e9, 1e12}) {
    auto c = floor.Choose(m, bps);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(c->variant.codec != "kvtc" || c->variant.level == "8") << bps;
  }
  EXPECT_EQ(floor.Choose(m, 1e3)->variant.level, "8");
}

// A lossless codec other than raw (planes) needs no measured loss: it ranks with raw at 0, ahead
// of every lossy rung, and between the two the faster wins.
TEST(LevelPlanner, ALosslessCodecRanksWithRawAndWinsWhenFaster) {
  using Rung = LevelPlanner::Rung;
  ASSERT_TRUE(FindCodec("planes")->info().lossless);
  // Measured loss for the lossy rung only; planes is missing from it, as from every profile.
  const std::map<Rung, double> loss = {{{"quant", "8"}, 1e-6}};
  const ChunkManifest m = Manifest({{"raw", "fp16", 64'000}, {"planes", "lossless", 50'000}, {"quant", "8", 48'000}});
  LevelPlanner planner({}, 1, 0, 0, loss, 1000);
  planner.ObserveDecode({"raw", "fp16", 0}, 0.0001, 64);
  planner.ObserveDecode({"planes", "lossless", 0}, 0.0004, 64);
  planner.ObserveDecode({"quant", "8", 0}, 0.0002, 64);
  // At 10 MB/s transfer decides: planes (5.0 ms) beats raw (6.4 ms), and quant 8 (4.8 ms) is
  // within 5% of it, but planes is exact and quant is not.
  auto slow = planner.Choose(m, 10e6);
  EXPECT_EQ(slow->variant.codec, "planes");
  EXPECT_NEAR(slow->predicted_s, 0.005, 1e-9);
  // Uncapped, raw's faster decode wins between the two exact rungs.
  EXPECT_EQ(planner.Choose(m, 1e12)->variant.codec, "raw");
  // A floor of the lossless rungs alone (a model without a quality profile) fetches planes where
  // it is faster, raw where raw is.
  LevelPlanner lossless({{"raw", "fp16"}, {"planes", "lossless"}}, 1, 0, 0, {}, 1000);
  lossless.ObserveDecode({"raw", "fp16", 0}, 0.0001, 64);
  lossless.ObserveDecode({"planes", "lossless", 0}, 0.0004, 64);
  EXPECT_EQ(lossless.Choose(m, 10e6)->variant.codec, "planes");
  EXPECT_EQ(lossless.Choose(m, 1e12)->variant.codec, "raw");
  // A codec name this build does not know has no loss but what was measured.
  const ChunkManifest unknown = Manifest({{"raw", "fp16", 64'000}, {"nosuch", "x", 1'000}});
  LevelPlanner guess({}, 1, 0, 0, {}, 1000);
  guess.ObserveDecode({"raw", "fp16", 0}, 0.0001, 64);
  guess.ObserveDecode({"nosuch", "x", 0}, 0.0001, 64);
  EXPECT_EQ(guess.Choose(unknown, 1e6)->variant.codec, "nosuch") << "beyond the margin: bandwidth decides";
  EXPECT_EQ(guess.Choose(Manifest({{"raw", "fp16", 1'020}, {"nosuch", "x", 1'000}}), 1e6)->variant.codec, "raw")
      << "within the margin: the exact rung";
}

KvCache RandomKv(uint32_t seed, const KvShape& shape) { return NoiseKv(shape, DType::kF16, seed); }

// Stores n chunks of random KV, each as every (codec, level) given, with manifests.
struct StoredRun {
  std::unique_ptr<Store> store = MakeMemoryStore({});
  std::vector<ChunkKey> keys;
  std::vector<ChunkManifest> manifests;
  std::vector<KvCache> originals;
  KvCache prefix;  // where the fetcher decodes the run
};

StoredRun StoreRun(uint32_t n, const std::vector<std::pair<std::string, std::string>>& variants,
                   const KvShape& shape = kChunkShape, std::unique_ptr<Store> store = nullptr) {
  StoredRun run;
  if (store) run.store = std::move(store);
  std::vector<int32_t> tokens(n * shape.n_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 1000);
  run.keys = ChunkKeys(kFp, tokens, shape.n_tokens);
  for (uint32_t i = 0; i < n; ++i) {
    run.originals.push_back(RandomKv(i, shape));
    run.originals.back().set_pos_begin(static_cast<int32_t>(i * shape.n_tokens));  // chunk i's place in the prefix
    ChunkManifest m{.chunk_tokens = shape.n_tokens, .chunk_index = i, .variants = {}};
    for (const auto& [codec, level] : variants) {
      const auto bytes = EncodeKvc(*FindCodec(codec), run.originals.back().View(), {.level = level, .params = {}}, kFp,
                                   i * shape.n_tokens)
                             .value();
      EXPECT_TRUE(run.store->Put(ChunkObjectName(run.keys[i], codec, level), bytes).ok());
      m.variants.push_back({codec, level, bytes.size()});
    }
    run.manifests.push_back(m);
  }
  KvShape prefix_shape = shape;
  prefix_shape.n_tokens = n * shape.n_tokens;
  run.prefix = KvCache::Create(prefix_shape, DType::kF16).value();
  return run;
}

TEST(Fetcher, DeliversEveryChunkInOrderDecoded) {
  // On the calling thread, and on a pool's three workers.
  for (size_t pool_threads : {0u, 4u}) {
    SCOPED_TRACE(pool_threads);
    std::unique_ptr<ThreadPool> pool = pool_threads ? std::make_unique<ThreadPool>(pool_threads) : nullptr;
    StoredRun run = StoreRun(6, {{"quant", "8"}});
    for (KvKind kind : kKvKinds) std::fill(run.prefix.Bytes(kind).begin(), run.prefix.Bytes(kind).end(), 0xEE);
    LinkShaper link;
    Fetcher fetcher(*run.store, link, kFp, {}, {.pool = pool.get()});
    std::vector<uint32_t> order;
    auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [&](FetchedChunk&& c) {
      order.push_back(c.index);
      EXPECT_EQ(c.kv.shape(), kChunkShape);
      const auto direct = DecodeKvc(run.store->Get(ChunkObjectName(run.keys[c.index], "quant", "8")).value()).value();
      EXPECT_TRUE(c.kv.Copy().value() == direct) << "chunk " << c.index;
      return Status::Ok();
    });
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->chunks, 6u);
    EXPECT_TRUE(report->stop_reason.empty());
    EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
    // Every chunk landed in its place in the one prefix buffer.
    for (uint32_t i = 0; i < 6; ++i) {
      const auto direct = DecodeKvc(run.store->Get(ChunkObjectName(run.keys[i], "quant", "8")).value()).value();
      EXPECT_TRUE(run.prefix.View(i * kChunkShape.n_tokens, kChunkShape.n_tokens).value().Copy().value() == direct);
    }
  }
}

// Objects are read into the buffers the options lend and given back after each decode, on every
// path (a missing chunk's read too), never more kept than lent: the chunks are as decoded alone.
TEST(Fetcher, ReadsIntoLentBuffersAndGivesThemBack) {
  ThreadPool pool(3);
  StoredRun run = StoreRun(6, {{"quant", "8"}});
  ReadBuffers buffers(2, 1 << 20);
  buffers.Warm(2, 4096);
  LinkShaper link;
  Fetcher fetcher(*run.store, link, kFp, {}, {.pool = &pool, .read_buffers = &buffers});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [&](FetchedChunk&& c) {
    const auto direct = DecodeKvc(run.store->Get(ChunkObjectName(run.keys[c.index], "quant", "8")).value()).value();
    EXPECT_TRUE(c.kv.Copy().value() == direct) << "chunk " << c.index;
    return Status::Ok();
  });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 6u) << report->stop_reason;
  EXPECT_EQ(buffers.kept(), 2u);

  ASSERT_TRUE(run.store->Delete(ChunkObjectName(run.keys[3], "quant", "8")).ok());
  Fetcher again(*run.store, link, kFp, {}, {.pool = &pool, .read_buffers = &buffers});
  report = again.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 3u);
  EXPECT_EQ(buffers.kept(), 2u) << "the missing chunk's buffer came back too";
}

// The later chunks of a run alone (the first ones prefilled instead: prefill_split.h): each
// lands at its own position of the buffer, and the tokens before them are not touched; a start
// the header does not agree with is damage, not a silent misplacement.
TEST(Fetcher, RunsFromALaterChunkIntoItsPlace) {
  StoredRun run = StoreRun(5, {{"quant", "8"}});
  for (KvKind kind : kKvKinds) std::fill(run.prefix.Bytes(kind).begin(), run.prefix.Bytes(kind).end(), 0xEE);
  LinkShaper link;
  Fetcher fetcher(*run.store, link, kFp, {}, {});
  const uint32_t first = 2;
  const std::span<const ChunkKey> keys = std::span(run.keys).subspan(first);
  const std::span<const ChunkManifest> manifests = std::span(run.manifests).subspan(first);
  std::vector<uint32_t> indices;
  auto report = fetcher.Run(
      keys, manifests, run.prefix,
      [&](FetchedChunk&& c) {
        indices.push_back(c.index);
        EXPECT_EQ(c.kv.pos_begin(), static_cast<int32_t>((first + c.index) * kChunkShape.n_tokens));
        return Status::Ok();
      },
      static_cast<int32_t>(first * kChunkShape.n_tokens));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 3u);
  EXPECT_EQ(indices, (std::vector<uint32_t>{0, 1, 2}));  // indices within the run
  for (uint32_t i = 0; i < 5; ++i) {
    const KvCache held = run.prefix.View(i * kChunkShape.n_tokens, kChunkShape.n_tokens).value().Copy().value();
    if (i < first) {
      for (KvKind kind : kKvKinds) {
        EXPECT_TRUE(std::all_of(held.Bytes(kind).begin(), held.Bytes(kind).end(), [](uint8_t b) { return b == 0xEE; }))
            << "chunk " << i << " was not fetched and must be left alone";
      }
    } else {
      const auto direct = DecodeKvc(run.store->Get(ChunkObjectName(run.keys[i], "quant", "8")).value()).value();
      EXPECT_TRUE(held == direct) << "chunk " << i;
    }
  }
  // The same chunks told to start one chunk early: chunk 2's object says position 512, its
  // place would be 256, and the run stops there as damaged.
  Fetcher again(*run.store, link, kFp, {}, {});
  auto misplaced = again.Run(
      keys, manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); },
      static_cast<int32_t>((first - 1) * kChunkShape.n_tokens));
  ASSERT_TRUE(misplaced.ok()) << misplaced.status().ToString();
  EXPECT_EQ(misplaced->chunks, 0u);
  EXPECT_TRUE(misplaced->stopped_on_damage) << misplaced->stop_reason;
}

// A chunk the host-memory tier holds is copied from there: no store read (its objects may be
// gone), counted in the report; one it holds for another place, or decoded from a variant the
// fetch does not allow, is fetched as usual.
TEST(Fetcher, CopiesTheChunksTheMemoryTierHolds) {
  StoredRun run = StoreRun(3, {{"raw", "fp16"}});
  DecodedChunkCache memory(uint64_t{64} << 20);
  ASSERT_TRUE(memory.Put(run.keys[0], run.originals[0].View(), {"raw", "fp16", 0}).ok());
  ASSERT_TRUE(memory.Put(run.keys[1], run.originals[2].View(), {"raw", "fp16", 0}).ok());  // chunk 2's place
  ASSERT_TRUE(memory.Put(run.keys[2], run.originals[2].View(), {"quant", "8", 0}).ok());   // not allowed
  ASSERT_TRUE(run.store->Delete(ChunkObjectName(run.keys[0], "raw", "fp16")).ok());
  LinkShaper link;
  FetchOptions options;
  options.allowed = {{"raw", "fp16"}};
  options.memory = &memory;
  Fetcher fetcher(*run.store, link, kFp, {}, options);
  std::vector<bool> from_memory;
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [&](FetchedChunk&& c) {
    from_memory.push_back(c.from_memory);
    EXPECT_TRUE(c.kv.Copy().value() == run.originals[c.index]) << "chunk " << c.index;
    return Status::Ok();
  });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 3u) << report->stop_reason;
  EXPECT_EQ(report->memory_chunks, 1u);
  EXPECT_EQ(from_memory, (std::vector<bool>{true, false, false}));
  // What a split prices: nothing for the chunk held, the others at the link.
  options.initial_gbps = 0.008;  // 1 MB/s
  const std::vector<double> s = PredictFetchSeconds(options, run.manifests, run.keys);
  EXPECT_EQ(s[0], 0);
  EXPECT_GT(s[2], 0);
}

// What the fetched side of a prefill split is priced at: each chunk's chosen variant over the
// first bandwidth guess, and infinity where no variant is allowed.
TEST(Fetcher, PredictsEachChunksFetchAtTheFirstBandwidthGuess) {
  ChunkManifest allowed_one = Manifest({{"raw", "fp16", 1'000'000}, {"quant", "8", 500'000}});
  ChunkManifest none_allowed = Manifest({{"rotquant", "3", 100'000}});
  FetchOptions options;
  options.allowed = {{"raw", "fp16"}, {"quant", "8"}};
  options.loss = {{{"quant", "8"}, 0.01}};
  options.initial_gbps = 0.08;  // 10 MB/s
  options.recompute_s = 1e-6;   // left out: a prediction is of the fetch
  const std::vector<ChunkManifest> manifests = {allowed_one, none_allowed};
  const std::vector<double> s = PredictFetchSeconds(options, manifests);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_NEAR(s[0], 0.05, 1e-9);  // quant 8's 500 KB: raw's 1 MB is twice as slow
  EXPECT_TRUE(std::isinf(s[1]));
}

// Through two slots, chunk after chunk: each delivered chunk is its own decode at its own
// positions (the slot is reused only after the chunk in it was delivered), with more chunks than
// slots and more workers than slots; a chunk of another length than the slots is refused.
TEST(Fetcher, ThroughSlotsDeliversEachChunkBeforeItsSlotIsReused) {
  for (size_t pool_threads : {0u, 4u}) {
    SCOPED_TRACE(pool_threads);
    std::unique_ptr<ThreadPool> pool = pool_threads ? std::make_unique<ThreadPool>(pool_threads) : nullptr;
    StoredRun run = StoreRun(7, {{"quant", "8"}});
    std::vector<KvCache> slots;
    for (int i = 0; i < 2; ++i) slots.push_back(KvCache::CreateForOverwrite(kChunkShape, DType::kF16).value());
    LinkShaper link;
    Fetcher fetcher(*run.store, link, kFp, {}, {.pool = pool.get()});
    std::vector<uint32_t> order;
    auto report = fetcher.RunThroughSlots(run.keys, run.manifests, slots, [&](FetchedChunk&& c) {
      order.push_back(c.index);
      EXPECT_EQ(c.kv.pos_begin(), static_cast<int32_t>(c.index * kChunkShape.n_tokens));
      const auto direct = DecodeKvc(run.store->Get(ChunkObjectName(run.keys[c.index], "quant", "8")).value()).value();
      EXPECT_TRUE(c.kv.Copy().value() == direct) << "chunk " << c.index;
      return Status::Ok();
    });
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->chunks, 7u);
    EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6}));
  }
  StoredRun run = StoreRun(2, {{"quant", "8"}});
  // A slot shorter than a chunk (a longer one holds a tail as well as a whole chunk).
  KvShape shorter = kChunkShape;
  shorter.n_tokens /= 2;
  std::vector<KvCache> wrong{KvCache::Create(shorter, DType::kF16).value()};
  LinkShaper link;
  Fetcher fetcher(*run.store, link, kFp, {}, {});
  EXPECT_FALSE(
      fetcher.RunThroughSlots(run.keys, run.manifests, wrong, [](FetchedChunk&&) { return Status::Ok(); }).ok());
  EXPECT_FALSE(fetcher.RunThroughSlots(run.keys, run.manifests, {}, [](FetchedChunk&&) { return Status::Ok(); }).ok());
}

// Under a link cap the whole run takes at least stored bytes / rate, and decoding hides under the
// transfers: the run ends within one chunk's decode (plus scheduling slack) of the last byte.
TEST(Fetcher, PipelineUnderTheLinkCap) {
  StoredRun run = StoreRun(8, {{"quant", "8"}});
  uint64_t bytes = 0;
  for (const auto& m : run.manifests) bytes += m.variants[0].bytes;
  const double rate = 2e6;  // 2 MB/s
  LinkShaper link(rate);
  ThreadPool pool(3);
  Fetcher fetcher(*run.store, link, kFp, {}, {.pool = &pool, .initial_gbps = rate * 8 / 1e9});
  double max_decode = 0;
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [&](FetchedChunk&& c) {
    max_decode = std::max(max_decode, c.decode_s);
    return Status::Ok();
  });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 8u);
  EXPECT_EQ(report->bytes, bytes);
  const double transfer = static_cast<double>(bytes) / rate;
  EXPECT_GE(report->wall_s, transfer * 0.999);
  EXPECT_LE(report->wall_s, transfer + max_decode + 0.25) << "decode did not hide under the transfers";
  // The estimator saw the cap.
  EXPECT_NEAR(fetcher.bandwidth().BytesPerSecond(), rate, rate * 0.3);
}

TEST(Fetcher, StopsAtAMissingChunkAndSaysWhy) {
  StoredRun run = StoreRun(5, {{"quant", "8"}});
  ASSERT_TRUE(run.store->Delete(ChunkObjectName(run.keys[3], "quant", "8")).ok());
  LinkShaper link;
  Fetcher fetcher(*run.store, link, kFp, {}, {});
  uint32_t seen = 0;
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [&](FetchedChunk&&) {
    ++seen;
    return Status::Ok();
  });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 3u);
  EXPECT_EQ(seen, 3u);
  EXPECT_NE(report->stop_reason.find("chunk 3"), std::string::npos) << report->stop_reason;
  EXPECT_NE(report->stop_reason.find("not found"), std::string::npos) << report->stop_reason;
  EXPECT_FALSE(report->stopped_on_damage) << "a missing object is not a damaged one";
}

TEST(Fetcher, StopsAtACorruptChunk) {
  StoredRun run = StoreRun(4, {{"quant", "8"}});
  const std::string name = ChunkObjectName(run.keys[1], "quant", "8");
  auto bytes = run.store->Get(name).value();
  bytes[bytes.size() / 2] ^= 0x10;
  ASSERT_TRUE(run.store->Put(name, bytes).ok());
  LinkShaper link;
  Fetcher fetcher(*run.store, link, kFp, {}, {});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 1u);
  EXPECT_NE(report->stop_reason.find("chunk 1"), std::string::npos) << report->stop_reason;
  EXPECT_TRUE(report->stopped_on_damage);
}

TEST(Fetcher, AChunkForAnotherPlaceInThePrefixIsRejected) {
  StoredRun run = StoreRun(3, {{"quant", "8"}});
  // Chunk 2's object replaced by chunk 0's bytes: well-formed, but for positions 0..63.
  const auto chunk0 = run.store->Get(ChunkObjectName(run.keys[0], "quant", "8")).value();
  ASSERT_TRUE(run.store->Put(ChunkObjectName(run.keys[2], "quant", "8"), chunk0).ok());
  LinkShaper link;
  Fetcher fetcher(*run.store, link, kFp, {}, {});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 2u);
  EXPECT_NE(report->stop_reason.find("starts at position 0, expected 128"), std::string::npos) << report->stop_reason;
  EXPECT_TRUE(report->stopped_on_damage);
}

TEST(Fetcher, ChunksOfAnotherModelAreRejected) {
  StoredRun run = StoreRun(2, {{"quant", "8"}});
  LinkShaper link;
  Fetcher fetcher(*run.store, link, ModelFingerprint{1}, {}, {});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 0u);
  EXPECT_NE(report->stop_reason.find("another model"), std::string::npos) << report->stop_reason;
  EXPECT_TRUE(report->stopped_on_damage);
}

TEST(Fetcher, APlannedRecomputeIsNotDamage) {
  StoredRun run = StoreRun(2, {{"quant", "8"}});
  LinkShaper link;
  // Recomputing a chunk is priced at a nanosecond at a 1 byte/s link: always the faster choice.
  Fetcher fetcher(*run.store, link, kFp, {}, {.initial_gbps = 8e-9, .recompute_s = 1e-9});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 0u);
  EXPECT_NE(report->stop_reason.find("recomputing"), std::string::npos) << report->stop_reason;
  EXPECT_FALSE(report->stopped_on_damage);
}

// ---------------------------------------------------------------------------------------------
// Hostile stores: bounded reads, lying manifests, stores that throw

// A store in front of another, recording every read and its bound; a read of `throw_on` throws
// std::bad_alloc (as a store that allocated what a 20 GiB object asks for did).
class WatchedStore final : public Store {
 public:
  explicit WatchedStore(Store& store, std::string throw_on = "") : store_(store), throw_on_(std::move(throw_on)) {}
  std::string url() const override { return "watched+" + store_.url(); }
  Status Put(std::string_view name, std::span<const uint8_t> bytes) override { return store_.Put(name, bytes); }
  Result<std::vector<uint8_t>> Get(std::string_view name, uint64_t max_bytes) override {
    {
      std::lock_guard lock(mu_);
      reads_.emplace(std::string(name), max_bytes);
    }
    if (name == throw_on_) throw std::bad_alloc();
    return store_.Get(name, max_bytes);
  }
  Result<bool> Exists(std::string_view name) override { return store_.Exists(name); }
  Status Delete(std::string_view name) override { return store_.Delete(name); }
  Result<StoreStats> Stats() override { return store_.Stats(); }
  std::map<std::string, uint64_t> reads() const {
    std::lock_guard lock(mu_);
    return reads_;
  }

 private:
  Store& store_;
  const std::string throw_on_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> reads_;  // name: the bound it was read with
};

// Chunk 2's manifest says its object is a byte shorter than it is: the store refuses the object
// unread (with a bound of the manifest's size), and the run stops there on a damaged chunk.
// Before, the object was read whole whatever the manifest said.
TEST(Fetcher, AnObjectLargerThanItsManifestSaysIsRefusedUnread) {
  StoredRun run = StoreRun(4, {{"quant", "8"}});
  run.manifests[2].variants[0].bytes -= 1;
  WatchedStore store(*run.store);
  LinkShaper link;
  ThreadPool pool(3);
  Fetcher fetcher(store, link, kFp, {}, {.pool = &pool, .kv_shape = kChunkShape});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 2u);
  EXPECT_TRUE(report->stopped_on_damage);
  EXPECT_NE(report->stop_reason.find("chunk 2"), std::string::npos) << report->stop_reason;
  EXPECT_NE(report->stop_reason.find("bytes, more than the"), std::string::npos) << report->stop_reason;
  // Every object was read with its manifest's size as the bound.
  for (uint32_t i = 0; i <= 2; ++i) {
    EXPECT_EQ(store.reads().at(ChunkObjectName(run.keys[i], "quant", "8")), run.manifests[i].variants[0].bytes) << i;
  }
}

// A manifest that gives a variant 20 GB, for chunks of 64 tokens of a model whose raw fp16 chunk is
// 32 KiB: the run stops at that chunk as damaged, and the store is never asked for the object
// (nor the planner for its price). Before, the fetcher read whatever the manifest named.
TEST(Fetcher, AManifestClaimingMoreThanAChunkCanTakeIsRefusedBeforeFetching) {
  StoredRun run = StoreRun(3, {{"quant", "8"}});
  run.manifests[1].variants[0].bytes = 20'000'000'000;
  WatchedStore store(*run.store);
  LinkShaper link;
  Fetcher fetcher(store, link, kFp, {}, {.kv_shape = kChunkShape});
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 1u);
  EXPECT_TRUE(report->stopped_on_damage);
  EXPECT_NE(report->stop_reason.find("chunk 1: manifest: variant quant/8 claims 20000000000 bytes, more than the"),
            std::string::npos)
      << report->stop_reason;
  EXPECT_EQ(store.reads().count(ChunkObjectName(run.keys[1], "quant", "8")), 0u) << "the object was read";
  EXPECT_EQ(store.reads().size(), 1u);
  // Without the model's geometry the bound is the stores' default.
  run.manifests[1].variants[0].bytes = kDefaultMaxObjectBytes + 1;
  Fetcher blind(store, link, kFp, {}, {});
  report = blind.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chunks, 1u);
  EXPECT_TRUE(report->stopped_on_damage);
}

// No codec writes more than MaxChunkObjectBytes for a chunk, at any level, even for KV that does
// not compress (noise) and chunks of a token or a few, where per-channel tables weigh most.
TEST(Fetcher, EveryCodecFitsTheChunkSizeBound) {
  const KvShape shapes[] = {
      kChunkShape,
      {.n_layers = 3, .n_kv_heads = 3, .head_dim = 24, .n_tokens = 7},
      {.n_layers = 2, .n_kv_heads = 8, .head_dim = 128, .n_tokens = 1},
      {.n_layers = 2, .n_kv_heads = 8, .head_dim = 128, .n_tokens = 16},
  };
  for (const Codec* codec : AllCodecs()) {
    if (codec->info().needs_calibration) continue;
    for (const std::string& level : codec->info().levels) {
      for (const KvShape& shape : shapes) {
        const auto bytes = EncodeKvc(*codec, RandomKv(7, shape).View(), {.level = level, .params = {}}, kFp, 0);
        if (!bytes.ok()) continue;  // a shape the codec does not take
        const double raw = static_cast<double>(shape.fp16_bytes());
        EXPECT_LE(bytes->size(), MaxChunkObjectBytes(shape, shape.n_tokens))
            << codec->info().name << "/" << level << " at " << shape.n_tokens << " tokens: " << bytes->size() / raw
            << "x raw";
      }
    }
  }
  // Saturates, for geometries no model has.
  EXPECT_EQ(MaxChunkObjectBytes({.n_layers = ~0u, .n_kv_heads = ~0u, .head_dim = ~0u}, ~0u), ~uint64_t{0});
}

// A video decoder that takes its time and counts the decodes running, so that a run's end can be
// checked against the decodes it started.
class SlowVideoDecoder final : public VideoDecoderBackend {
 public:
  const char* name() const override { return "slow"; }
  Status Decode(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                std::span<uint8_t> out) const override {
    ++running_;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    const Status s = CpuVideoDecoder().Decode(stream, expected, expected_frames, out);
    --running_;
    return s;
  }
  int running() const { return running_.load(); }

 private:
  mutable std::atomic<int> running_{0};
};

// The store throws (std::bad_alloc) on chunk 3's read while chunks 0 to 2 are still decoding on
// the pool: the run ends at chunk 3 with the reason, and only after those decodes finished.
// Before, the exception unwound Run past its wait for the decodes, which then wrote into its dead
// frame (the SIGSEGV of `kvcodec run` on an oversized dir:// object).
TEST(Fetcher, AStoreThatThrowsEndsTheRunAfterTheDecodesInFlight) {
  StoredRun run = StoreRun(5, {{"video", "8"}});
  WatchedStore store(*run.store, ChunkObjectName(run.keys[3], "video", "8"));
  SlowVideoDecoder decoder;
  const CodecContext context{nullptr, nullptr, nullptr, &decoder};
  LinkShaper link;
  ThreadPool pool(4);
  Fetcher fetcher(store, link, kFp, context, {.pool = &pool, .inflight = 5, .kv_shape = kChunkShape});
  std::optional<Result<FetchReport>> report;
  EXPECT_NO_THROW(
      report.emplace(fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); })));
  EXPECT_EQ(decoder.running(), 0) << "Run returned while decodes were running";
  ASSERT_TRUE(report && report->ok()) << (report ? report->status().ToString() : "threw");
  EXPECT_EQ((*report)->chunks, 3u);
  EXPECT_FALSE((*report)->stopped_on_damage);
  EXPECT_NE((*report)->stop_reason.find("chunk 3"), std::string::npos) << (*report)->stop_reason;
  EXPECT_NE((*report)->stop_reason.find("out of memory"), std::string::npos) << (*report)->stop_reason;

  // An exception from on_chunk is an error of the run, also returned after the decodes.
  Fetcher again(*run.store, link, kFp, context, {.pool = &pool, .inflight = 5, .kv_shape = kChunkShape});
  std::optional<Result<FetchReport>> failed;
  EXPECT_NO_THROW(failed.emplace(again.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&& c) -> Status {
    if (c.index == 1) throw std::runtime_error("the caller failed");
    return Status::Ok();
  })));
  EXPECT_EQ(decoder.running(), 0) << "Run returned while decodes were running";
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->status().code(), StatusCode::kInternal);
  EXPECT_NE(failed->status().message().find("the caller failed"), std::string::npos) << failed->status().ToString();
}

// What `kvcodec run` met: a dir:// store in which a chunk's object was made 20 GiB long (sparse),
// read under an address-space limit far below that, with decodes on a pool. The run ends at that
// chunk, as damaged, and the child exits cleanly. Before, it died (std::bad_alloc, then a
// SIGSEGV in a decode writing into the unwound Run).
TEST(Fetcher, AHugeObjectInADirStoreIsADamagedChunkUnderAMemoryLimit) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvc-fetch-huge-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  StoredRun run = StoreRun(4, {{"quant", "8"}}, kChunkShape, OpenStore("dir://" + dir.string()).value());
  const std::string name = ChunkObjectName(run.keys[2], "quant", "8");
  std::filesystem::path file;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "objects")) {
    if (e.path().filename() == name) file = e.path();
  }
  ASSERT_FALSE(file.empty());
  std::filesystem::resize_file(file, uint64_t{20} << 30);
  const std::string said = RunInChild(
      [&]() -> std::string {
        ThreadPool pool(4);
        LinkShaper link;
        Fetcher fetcher(*run.store, link, kFp, {}, {.pool = &pool, .kv_shape = kChunkShape});
        auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
        if (!report.ok()) return "run: " + report.status().ToString();
        if (report->chunks != 2 || !report->stopped_on_damage ||
            report->stop_reason.find("more than the") == std::string::npos) {
          return "delivered " + std::to_string(report->chunks) + ", stopped: " + report->stop_reason;
        }
        return "";
      },
      {.alarm_s = 60, .address_space_headroom = uint64_t{1} << 30});
  EXPECT_EQ(said, "");
  std::filesystem::remove_all(dir);
}

// The CPU video decoder, recording the picture and frame count of every stream it decodes.
class RecordingVideoDecoder final : public VideoDecoderBackend {
 public:
  const char* name() const override { return "recording"; }
  Status Decode(std::span<const uint8_t> stream, const PictureShape& expected, uint32_t expected_frames,
                std::span<uint8_t> out) const override {
    {
      std::lock_guard lock(mu_);
      streams_.emplace_back(expected, expected_frames);
    }
    return CpuVideoDecoder().Decode(stream, expected, expected_frames, out);
  }
  std::vector<std::pair<PictureShape, uint32_t>> streams() const {
    std::lock_guard lock(mu_);
    return streams_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<PictureShape, uint32_t>> streams_;
};

// A well-formed object under the right name but of another shape (a chunk twice as long, or
// another head_dim) is turned away on its header: the run stops there, as damaged, and the
// video decoder never sees its streams (in the token-axis layout a stream is one T wide,
// n_kv_heads * head_dim high picture per layer).
TEST(Fetcher, AnObjectOfAnotherShapeIsRejectedBeforeDecoding) {
  const struct {
    KvShape shape;
    const char* why;
  } wrong[] = {
      {{.n_layers = 2, .n_kv_heads = 2, .head_dim = 32, .n_tokens = 128}, "n_tokens 128, expected 64"},
      {{.n_layers = 2, .n_kv_heads = 2, .head_dim = 16, .n_tokens = 64}, "head_dim 16, expected 32"},
      {{.n_layers = 3, .n_kv_heads = 2, .head_dim = 32, .n_tokens = 64}, "n_layers 3, expected 2"},
  };
  for (const auto& w : wrong) {
    SCOPED_TRACE(w.why);
    StoredRun run = StoreRun(3, {{"video", "8"}});
    KvCache other = RandomKv(99, w.shape);
    other.set_pos_begin(64);
    const auto bytes = EncodeKvc(*FindCodec("video"), other.View(), {.level = "8", .params = {}}, kFp, 64).value();
    ASSERT_TRUE(run.store->Put(ChunkObjectName(run.keys[1], "video", "8"), bytes).ok());
    // With a manifest that gives its size, as its writer's would: the header is what refuses it.
    run.manifests[1].variants[0].bytes = bytes.size();
    RecordingVideoDecoder decoder;
    const CodecContext context{nullptr, nullptr, nullptr, &decoder};
    LinkShaper link;
    FetchOptions options;
    options.kv_shape = kChunkShape;
    Fetcher fetcher(*run.store, link, kFp, context, options);
    auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [](FetchedChunk&&) { return Status::Ok(); });
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->chunks, 1u);
    EXPECT_NE(report->stop_reason.find("chunk 1"), std::string::npos) << report->stop_reason;
    EXPECT_NE(report->stop_reason.find(w.why), std::string::npos) << report->stop_reason;
    EXPECT_TRUE(report->stopped_on_damage);
    const std::pair<PictureShape, uint32_t> bad{
        {w.shape.n_tokens, static_cast<uint32_t>(w.shape.n_kv_heads * w.shape.head_dim), 1}, w.shape.n_layers};
    const auto seen = decoder.streams();
    EXPECT_FALSE(seen.empty()) << "chunk 0 was decoded through the recording decoder";
    for (const auto& stream : seen) EXPECT_FALSE(stream == bad) << "the wrong object's streams were decoded";
  }
}

// The link slows down while chunks are being fetched: the planner, fed by the bandwidth of the
// latest transfers, moves from the variant that decodes fastest (raw) to the smallest (video)
// within two chunks of the change.
TEST(Fetcher, PlannerSwitchesLevelWhenTheLinkSlowsDown) {
  const uint32_t n = 16;
  const uint32_t change_at = 9;  // the rate drops when chunk 9 is delivered
  // Chunks large enough that video's decode (milliseconds) clearly exceeds raw's transfer on the
  // fast link (tens of microseconds), and raw's transfer on the slow link (131 ms) clearly
  // exceeds video's transfer and decode, even under ASan (where decode is several times slower)
  // and with the estimate after the first slow transfer still twice the slow rate.
  const KvShape shape{.n_layers = 2, .n_kv_heads = 2, .head_dim = 64, .n_tokens = 256};
  StoredRun run = StoreRun(n, {{"raw", "fp16"}, {"video", "4"}}, shape);
  LinkShaper link(1e10);  // 10 GB/s, then 2 MB/s
  Fetcher fetcher(*run.store, link, kFp, {}, {});
  std::vector<std::string> codec_of(n);
  auto report = fetcher.Run(run.keys, run.manifests, run.prefix, [&](FetchedChunk&& c) {
    codec_of[c.index] = c.variant.codec;
    if (c.index == change_at) link.SetRate(2e6);
    return Status::Ok();
  });
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->chunks, n);
  std::string sequence;
  for (const auto& c : codec_of) sequence += c + " ";
  // Before the change raw wins (its transfer is cheaper than video's decode); the first chunks
  // explore, so only the last few before the change are checked, by majority (timing noise on a
  // loaded machine may flip one).
  int raw_before = 0;
  for (uint32_t i = change_at - 3; i <= change_at; ++i) raw_before += codec_of[i] == "raw";
  EXPECT_GE(raw_before, 3) << "on the fast link raw should win: " << sequence;
  // Chunk change_at + 1 may be on the link already when the rate drops; the next transfer is the
  // first at the new rate, and the one after it must be planned for the slow link.
  bool switched = false;
  for (uint32_t i = change_at + 1; i <= change_at + 3; ++i) switched |= codec_of[i] == "video";
  EXPECT_TRUE(switched) << sequence;
  for (uint32_t i = change_at + 4; i < n; ++i) EXPECT_EQ(codec_of[i], "video") << "chunk " << i << ": " << sequence;
}

}  // namespace
}  // namespace kvc
