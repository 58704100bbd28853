// Fetch -> decode pipeline for a run of stored chunks. The
// calling thread transfers the chunks one at a time in order, asking the level planner which
// variant to fetch at the bandwidth recent transfers achieved and reading it from the store
// through the link shaper (so a capped link is emulated in process); each fetched chunk is
// decoded on the caller's pool straight into its place in the caller's prefix buffer (or into
// one of a few chunk-sized slots, for a caller that restores each chunk as it comes), and handed
// back on the calling thread strictly in order. So decode hides under the next transfer, and the
// caller's own work on a delivered chunk (restoring it into llama.cpp) too. A chunk that is
// missing, fails to decode, or is planned for recompute ends the run there: the caller
// recomputes from that chunk on, and the report says why.
//
// Every read is bounded (store.h): a manifest by the largest manifest there can be, a chunk's
// object by the size its manifest gives, and that size by what a chunk of the model can take in
// any codec, so neither a hostile object nor a lying manifest makes a run allocate more.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "fetch/decoded_chunk_cache.h"
#include "fetch/level_planner.h"
#include "fetch/link.h"
#include "store/chunk_key.h"
#include "store/chunk_manifest.h"
#include "store/store.h"
#include "tensor/kv_cache.h"

namespace kvc {

class ReadBuffers;
class ThreadPool;

// The most bytes one stored variant (a .kvc file) of a chunk of `chunk_tokens` tokens of a model
// of `shape` (n_tokens ignored) may take, whatever its codec: kChunkSizeFactor times the raw fp16
// KV of chunk_tokens + kChunkTableTokens tokens (the extra tokens: room for a codec's per-channel
// tables, which weigh most in a chunk of a few tokens), plus the largest .kvc header and section
// table. No codec comes near it (fetch_test checks every one on noise); a manifest that gives a
// variant more is damaged, and the fetcher stops there without reading it. Saturates instead of
// overflowing.
inline constexpr uint64_t kChunkSizeFactor = 2;
inline constexpr uint64_t kChunkTableTokens = 64;
uint64_t MaxChunkObjectBytes(const KvShape& shape, uint32_t chunk_tokens);

struct FetchOptions {
  // Where chunks are decoded (and what codecs may use inside one decode): the one pool fetch,
  // decode and encode work shares, so a fetch never starts threads of its own. Null, or a pool
  // without workers: each chunk is decoded on the calling thread after its transfer.
  ThreadPool* pool = nullptr;
  // Chunks transferred but not yet delivered (at least one more than the pool's workers, so
  // every worker has a chunk to decode while the next is on the link).
  unsigned inflight = 2;
  double initial_gbps = 1.0;  // bandwidth assumed before the first transfer completes
  double recompute_s = 0;     // seconds to prefill one chunk here; 0: never plan a recompute
  // The tokens of the chunk recompute_s is for: a shorter one (a tail) is priced by its share
  // (0: every chunk at recompute_s).
  uint32_t recompute_tokens = 0;
  std::vector<std::pair<std::string, std::string>> allowed;  // (codec, level); empty: any
  // Measured quality loss of each allowed rung (the model's profile, lower is better): the
  // planner fetches the most accurate rung whose predicted time is within quality_margin of
  // the fastest (LevelPlanner).
  std::map<std::pair<std::string, std::string>, double> loss;
  double quality_margin = kDefaultQualityMargin;
  // The model's KV geometry (n_layers, n_kv_heads, head_dim; n_tokens is ignored). Each chunk
  // must hold exactly that, with its manifest's chunk_tokens tokens at position
  // index * chunk_tokens: checked on the object's header before it is decoded, so a wrong or
  // hostile object costs no decode and no allocation of the size it claims. Unset: only the
  // tokens and the position are checked (before decoding too).
  std::optional<KvShape> kv_shape;
  // The host-memory tier (may be null): a chunk it holds, for this chunk's place and decoded from
  // an allowed variant, is copied from there instead of fetched. The fetcher never adds to it.
  DecodedChunkCache* memory = nullptr;
  // Buffers objects are read into and given back to after their decode (may be null: each read
  // allocates its own).
  ReadBuffers* read_buffers = nullptr;
};

struct FetchedChunk {
  uint32_t index = 0;
  ChunkVariant variant;
  double transfer_s = 0;  // store read plus link time
  double decode_s = 0;
  double predicted_s = 0;    // what the planner expected
  KvView kv;                 // the chunk's tokens, decoded in the prefix buffer
  bool from_memory = false;  // copied from the host-memory tier (variant: what it was decoded from)
};

struct FetchReport {
  uint32_t chunks = 0;                 // delivered, from chunk 0 on without a gap
  uint32_t memory_chunks = 0;          // of them, copied from the host-memory tier
  uint64_t bytes = 0;                  // fetched (compressed)
  double wall_s = 0;                   // first request to last chunk delivered
  double decode_s = 0;                 // summed over chunks
  double transfer_s = 0;               // summed over chunks
  std::vector<ChunkVariant> variants;  // per delivered chunk
  std::string stop_reason;             // empty when every chunk was delivered
  // The run stopped on a damaged chunk: its object was there but unusable (the store found it
  // corrupt or larger than its manifest says, or it failed to decode, or was made for another
  // model, shape or place), or its manifest gives a size no chunk of the model can have. False
  // when it stopped on a missing object, a store error, no allowed variant or a planned
  // recompute, and when every chunk was delivered.
  bool stopped_on_damage = false;
};

// options.memory's entry for the chunk under `key` when it is for tokens [pos_begin, pos_begin +
// tokens) of the model's geometry and was decoded from an allowed variant; null otherwise.
std::shared_ptr<const DecodedChunkCache::Entry> HeldInMemory(const FetchOptions& options, const ChunkKey& key,
                                                             int32_t pos_begin, uint32_t tokens);

// The planner a fetch with `options` chooses variants with.
LevelPlanner MakeLevelPlanner(const FetchOptions& options);

// Seconds each chunk of a run from position 0 is predicted to take to fetch: its variant, chosen
// as a Fetcher with `options` would at the start ("recompute" left out), over the link at
// options.initial_gbps (its decode, which a fresh fetch has not timed yet, is not counted); 0 for
// a chunk options.memory holds for it under keys[i] (HeldInMemory); infinity for a chunk with no
// allowed variant.
// What prices the fetched side of a prefill split (prefill_split.h).
std::vector<double> PredictFetchSeconds(const FetchOptions& options, std::span<const ChunkManifest> manifests,
                                        std::span<const ChunkKey> keys = {});

class Fetcher {
 public:
  Fetcher(Store& store, LinkShaper& link, const ModelFingerprint& model, const CodecContext& codec_context,
          FetchOptions options);

  // keys[i] and manifests[i] describe chunk i, which is decoded into `prefix`'s tokens at its
  // positions (right after chunk i - 1's: chunk_tokens of the chunks before it, summed, from
  // `first_position` for chunk 0; only the last may be shorter, a tail), so `prefix` (allocated
  // once by the caller, for the whole run) must cover them. on_chunk runs on the calling thread,
  // in chunk order; an error from it stops the run (and is returned). Store and decode failures
  // are not errors of Run: they end the run early with stop_reason set. After a run that stopped
  // early, the tokens of the chunks past the last one delivered hold an unspecified mix. Nothing
  // throws out of Run (an exception from the store or on_chunk becomes a stop reason or an
  // error), and Run returns only once every decode it started has finished, on every path.
  Result<FetchReport> Run(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests, KvCache& prefix,
                          const std::function<Status(FetchedChunk&&)>& on_chunk, int32_t first_position = 0);

  // Chunks transferred and not yet delivered at most: what RunThroughSlots needs slots for.
  unsigned Inflight() const;
  // As Run, but chunk i decodes into slots[i % slots.size()] (each one whole chunk's tokens; a
  // tail into the first of them), which
  // on_chunk must be done with when it returns: at most slots.size() chunks are in flight. For a
  // caller that takes each chunk as it comes (a restore into llama.cpp): the whole prefix is
  // never held, and chunks decode into memory that stays mapped and mostly in cache.
  Result<FetchReport> RunThroughSlots(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                                      std::span<KvCache> slots, const std::function<Status(FetchedChunk&&)>& on_chunk);
  const LevelPlanner& planner() const { return planner_; }
  BandwidthEstimator& bandwidth() { return bandwidth_; }

 private:
  // Chunk i decodes into place(i), called on the calling thread when its transfer ends; at most
  // max_inflight chunks (0: no limit beyond the options') are transferred and not delivered.
  Result<FetchReport> RunWithPlaces(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                                    const std::function<KvSlice(uint32_t)>& place, unsigned max_inflight,
                                    const std::function<Status(FetchedChunk&&)>& on_chunk);
  // kCorrupt when a variant of `manifest` claims more bytes than a chunk can take
  // (MaxChunkObjectBytes with the model's geometry; without one, kDefaultMaxObjectBytes).
  Status CheckManifestSizes(const ChunkManifest& manifest) const;
  // The host-memory tier's entry for the chunk under `key`, when it fits `place` (its positions
  // and geometry) and was decoded from an allowed variant; null otherwise.
  std::shared_ptr<const DecodedChunkCache::Entry> FromMemory(const ChunkKey& key, const KvSlice& place) const;

  Store& store_;
  LinkShaper& link_;
  ModelFingerprint model_;
  CodecContext codec_context_;
  FetchOptions options_;
  LevelPlanner planner_;
  BandwidthEstimator bandwidth_;
};

}  // namespace kvc
