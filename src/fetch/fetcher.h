// Fetch -> decode pipeline for a run of stored chunks (design brief §2.2, "fetcher"). A few
// workers each take the next chunk in order, ask the level planner which variant to fetch at the
// bandwidth recent transfers achieved, read it from the store through the link shaper (so a
// capped link is emulated in process), decode it, and hand it to the caller's thread, which
// receives chunks strictly in order. With two chunks in flight one decodes while the next is on
// the link, so decode hides under transfer. A chunk that is missing, fails to decode, or is
// planned for recompute ends the run there: the caller recomputes from that chunk on, and the
// report says why.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "fetch/level_planner.h"
#include "fetch/link.h"
#include "store/chunk_key.h"
#include "store/chunk_manifest.h"
#include "store/store.h"
#include "tensor/kv_cache.h"

namespace kvc {

struct FetchOptions {
  unsigned inflight = 2;         // chunks fetched or decoded at once (and the reorder buffer)
  double initial_gbps = 1.0;     // bandwidth assumed before the first transfer completes
  double recompute_s = 0;        // seconds to prefill one chunk here; 0: never plan a recompute
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
};

struct FetchedChunk {
  uint32_t index = 0;
  ChunkVariant variant;
  double transfer_s = 0;  // store read plus link time
  double decode_s = 0;
  double predicted_s = 0;  // what the planner expected
  KvCache kv;
};

struct FetchReport {
  uint32_t chunks = 0;          // delivered, from chunk 0 on without a gap
  uint64_t bytes = 0;           // fetched (compressed)
  double wall_s = 0;            // first request to last chunk delivered
  double decode_s = 0;          // summed over chunks
  double transfer_s = 0;        // summed over chunks
  std::vector<ChunkVariant> variants;  // per delivered chunk
  std::string stop_reason;      // empty when every chunk was delivered
  // The run stopped on a damaged chunk: its object was there but unusable (the store found it
  // corrupt, or it failed to decode, or was made for another model, shape or place). False
  // when it stopped on a missing object, a store error, no allowed variant or a planned
  // recompute, and when every chunk was delivered.
  bool stopped_on_damage = false;
};

class Fetcher {
 public:
  Fetcher(Store& store, LinkShaper& link, const ModelFingerprint& model, const CodecContext& codec_context,
          FetchOptions options);

  // keys[i] and manifests[i] describe chunk i. on_chunk runs on the calling thread, in chunk
  // order; an error from it stops the run (and is returned). Store and decode failures are not
  // errors of Run: they end the run early with stop_reason set.
  Result<FetchReport> Run(std::span<const ChunkKey> keys, std::span<const ChunkManifest> manifests,
                          const std::function<Status(FetchedChunk&&)>& on_chunk);

  const LevelPlanner& planner() const { return planner_; }
  BandwidthEstimator& bandwidth() { return bandwidth_; }

 private:
  Store& store_;
  LinkShaper& link_;
  ModelFingerprint model_;
  CodecContext codec_context_;
  FetchOptions options_;
  LevelPlanner planner_;
  BandwidthEstimator bandwidth_;
};

}  // namespace kvc
