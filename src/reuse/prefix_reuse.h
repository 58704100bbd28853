// The two halves of remote KV reuse around a llama.cpp session, shared by `kvcodec run`, the
// server and the TTFT benchmark: restoring a prompt's longest stored prefix (one batched lookup
// of the manifests and of the tails lists, then the fetcher), and storing a session's chunks
// (every rung, then the manifest) and its tail (chunk_tails.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codecs/codec.h"
#include "fetch/fetcher.h"
#include "fetch/prefill_cost.h"
#include "fetch/store_chunks.h"
#include "llama/llama_session.h"
#include "reuse/model_profile.h"
#include "store/chunk_key.h"
#include "store/chunk_manifest.h"
#include "store/store.h"

namespace kvc {

// What a request stores new chunks as: raw fp16 (what a fast link fetches, so reuse there
// changes nothing), then `codec`'s levels within the model's quality floor (what slower links
// fetch), or, when the floor allows none of them (every rung over it, or kvtc without the
// calibration its profile was measured with), the calibration-free planes (lossless), quant 8
// and rotquant 3 where the floor allows them (that is, where the model's profile measured them
// within it), with a note saying so. Without a profile the floor is lossless and so is the plan:
// raw and the lossless codecs (planes), and the floor's own note already says how to change
// that (no second note).
struct StorePlan {
  std::vector<StoredRung> rungs;
  std::string note;  // empty when the requested codec is stored, or the floor's note says why not
};
Result<StorePlan> PlanStoredRungs(const QualityFloor& floor, const std::string& codec);

// Whether the store is on this machine (dir://, mem://): read at page-cache speed, unlike a
// networked one (redis://).
bool StoreIsLocal(const Store& store);

// What a store's readers will fetch, so what is worth storing: from a local store with no link
// cap every fetch takes raw fp16 (nothing decodes faster than a page-cache read is copied), so
// the plan's other rungs would only take disk; a networked store, or a declared link, keeps them
// all (readers' bandwidths differ, and the fetcher picks per chunk). `keep_every_rung`: keep
// them anyway.
std::vector<StoredRung> RungsReadersFetch(const std::vector<StoredRung>& planned, const Store& store, double link_gbps,
                                          bool keep_every_rung);

// Keys of the prompt's chunks that may be reused: whole chunks before its last token, which is
// always prefilled (its logits give the first generated token).
std::vector<ChunkKey> ReusableChunkKeys(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                        uint32_t chunk_tokens);

// Fetch options for a request's reuse: any variant within the quality floor (the most accurate
// of those about as fast as the fastest), the link's rate as the first bandwidth guess,
// "recompute" priced at `recompute_s` per chunk of `chunk_tokens` (0: never), and the model's KV geometry, which
// every chunk's header must match before it is decoded.
// With no link cap the first guess is the store's kind: a local one (dir://, mem://) reads at
// page-cache speed, a networked one (redis://) at about 1 Gbps until a transfer says otherwise.
FetchOptions ReuseFetchOptions(double link_gbps, double recompute_s, uint32_t chunk_tokens, const ModelInfo& model,
                               const QualityFloor& floor, const Store& store);

// Seconds this machine takes to prefill one chunk, from prefilling `probe` in `session` (which
// is left empty): what prices "recompute" for the level planner.
Result<double> MeasureChunkPrefillSeconds(LlamaSession& session, std::span<const int32_t> probe, uint32_t chunk_tokens);

// What prefilling costs this machine by position (fetch/prefill_cost.h), for a server to start
// from: `probe` prefilled at the start of a context twice (the second, warm, is timed), then,
// where the memory takes restored KV (one KV cache), twice more after up to 2,048 restored cells
// (the second timed). `session` is left empty. A memory that takes no restored KV, or a context
// too short to tell the depths apart, gives a flat cost (no position term).
Result<PrefillCost> MeasurePrefillCost(LlamaSession& session, const ModelInfo& model, std::span<const int32_t> probe);

struct PrefixRestore {
  uint32_t chunks_found = 0;    // manifests present, from chunk 0 on
  uint32_t first_chunk = 0;     // chunks before it were left to the caller to prefill (a split)
  uint32_t chunks_fetched = 0;  // whole chunks restored into the session (from first_chunk on)
  uint32_t tail_tokens = 0;     // and tokens of a stored tail after them
  uint32_t memory_tokens = 0;   // of those restored, the ones the host-memory tier gave (no fetch)
  std::string fallback;         // why fewer than found were restored (or the lookup stopped)
  // Reuse stopped at a damaged chunk: an object or manifest that is corrupt, bound to another
  // name, not sealed with the store's secret, or for another model, shape or place (not a
  // missing one, a store that failed, or a planned recompute).
  bool damaged = false;
  std::vector<std::string> variants;  // "codec/level" per restored chunk
  uint64_t bytes = 0;
  double lookup_s = 0, fetch_s = 0, decode_s = 0, restore_s = 0;
  double max_chunk_decode_s = 0;
};

// A stored tail a request reuses: its key, its variants as a manifest (chunk_tokens: the tail's
// length; chunk_index: the whole chunks before it), and how many of its first tokens agree with
// the request's (their KV is what the request needs; the rest is decoded and not used).
struct StoredTail {
  ChunkKey key{};
  ChunkManifest manifest;
  uint32_t tokens = 0;
};

// The manifests of keys' longest stored run from chunk 0 and, after it, the stored tail that
// agrees with the most of `reusable` (the request's tokens it may reuse; keys are its whole
// chunks), from one batched lookup. A store that fails is not an error here: the lookup stops
// and says why in `fallback` (the request recomputes). Empty `reusable`: no tail is looked for.
struct PrefixLookup {
  std::vector<ChunkManifest> manifests;
  std::optional<StoredTail> tail;
  std::string fallback;
  bool damaged = false;  // the lookup stopped at a manifest that is damaged (PrefixRestore::damaged)
  double lookup_s = 0;
  // Tokens the lookup found: whole chunks and the tail's agreeing tokens.
  uint64_t tokens(uint32_t chunk_tokens) const {
    return uint64_t{chunk_tokens} * manifests.size() + (tail ? tail->tokens : 0);
  }
};
PrefixLookup LookupStoredPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                std::span<const int32_t> reusable, uint32_t chunk_tokens);

// Fetches the looked-up run through a Fetcher (link and options as given; options.kv_shape is
// required) into one buffer allocated once for the whole run, each chunk decoded in its place.
// `on_chunk` (may be empty) sees each chunk on the calling thread as it is delivered, in order,
// while later ones are still on the link; an error from it ends the fetch with that error.
// Without one nothing touches a llama.cpp session: a server runs this while other requests
// decode.
struct FetchedPrefix {
  PrefixRestore stats;  // restore_s: time spent in on_chunk
  // The run's buffer, from position 0: tokens [first_token(), tokens()) are the fetched ones; the
  // ones before them (a split's prefilled chunks) are the caller's to fill.
  KvCache kv;
  uint32_t chunk_tokens = 0;
  uint32_t first_token() const { return stats.first_chunk * chunk_tokens; }
  // Where the fetched tokens end (0: none were fetched).
  uint32_t tokens() const {
    const uint32_t fetched = stats.chunks_fetched * chunk_tokens + stats.tail_tokens;
    return fetched == 0 ? 0 : first_token() + fetched;
  }
  KvView view() const { return KvView(&kv, 0, tokens()); }
};
// `buffer` (may be empty): a buffer to decode into instead of allocating one, used when it is
// fp16 of the model's geometry and long enough (its pages already mapped: a page fault costs
// 10-20 us where they trap to a hypervisor, ~20 ms for a few MB of KV); it becomes the result's.
// `first_chunk`: the looked-up chunks before it are not fetched (the caller prefills them while
// the rest arrive: prefill_split.h); the rest land at their own positions in the buffer.
Result<FetchedPrefix> FetchLookedUpPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                          PrefixLookup lookup, const CodecContext& codec_context, LinkShaper& link,
                                          const FetchOptions& options,
                                          const std::function<Status(const KvView&)>& on_chunk = {},
                                          KvCache buffer = {}, uint32_t first_chunk = 0);
// LookupStoredPrefix, then FetchLookedUpPrefix.
Result<FetchedPrefix> FetchStoredPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                        std::span<const int32_t> reusable, uint32_t chunk_tokens,
                                        const CodecContext& codec_context, LinkShaper& link,
                                        const FetchOptions& options,
                                        const std::function<Status(const KvView&)>& on_chunk = {});

// FetchStoredPrefix into `session` (which must be empty), each chunk appended to it as it
// arrives, so only the last chunk's restore is left when the transfer ends.
Result<PrefixRestore> RestoreStoredPrefix(Store& store, LlamaSession& session, const ModelFingerprint& model,
                                          std::span<const ChunkKey> keys, std::span<const int32_t> reusable,
                                          uint32_t chunk_tokens, const CodecContext& codec_context, LinkShaper& link,
                                          const FetchOptions& options);
// The same for a run already looked up.
Result<PrefixRestore> RestoreLookedUpPrefix(Store& store, LlamaSession& session, const ModelFingerprint& model,
                                            std::span<const ChunkKey> keys, PrefixLookup lookup,
                                            const CodecContext& codec_context, LinkShaper& link,
                                            const FetchOptions& options);

// The ThreadPool size that gives a fetch `fetch_threads` workers (0: one per core); the calling
// thread, which waits on the link and restores, is not one of them.
size_t FetchPoolThreads(int fetch_threads);

// StoreHeldChunks (fetch/store_chunks.h) from the session's sequence (which must start at position 0 and hold
// `held`), each chunk copied out of llama.cpp only when it is encoded (LlamaSession::ExtractKvRange): storing a long
// prompt holds one chunk beside the session's cache, not a second copy of the whole cache.
Result<StoredChunks> StoreSessionChunks(Store& store, LlamaSession& session, std::span<const int32_t> held,
                                        size_t prompt_reusable, uint32_t first, uint32_t chunk_tokens,
                                        const std::vector<StoredRung>& rungs, const ModelFingerprint& model,
                                        const CodecContext& codec_context);

}  // namespace kvc
