#include "reuse/state_chunks.h"

#include <algorithm>

#include "base/clock.h"

namespace kvc {
namespace {

constexpr char kTokensLevel[] = "tokens";
constexpr char kBoundaryLevel[] = "boundary";

// The listed size of a manifest's variant at `level`, 0 when it lists none.
uint64_t ListedBytes(const ChunkManifest& m, const char* level) {
  for (const ChunkVariant& v : m.variants) {
    if (v.codec == kStateChunkCodec && v.level == level) return v.bytes;
  }
  return 0;
}

}  // namespace

bool IsStateChunkManifest(const ChunkManifest& manifest) { return ListedBytes(manifest, kTokensLevel) > 0; }

Result<StoredChunks> StoreStateChunk(Store& store, const ChunkKey& key, uint32_t chunk_index, uint32_t chunk_tokens,
                                     const ChunkState& chunk) {
  if (chunk.n_tokens != chunk_tokens || chunk.pos_begin != static_cast<int32_t>(chunk_index * chunk_tokens)) {
    return InvalidArgument("the chunk's tokens are not chunk " + std::to_string(chunk_index) + "'s");
  }
  StoredChunks out;
  ChunkManifest m{.chunk_tokens = chunk_tokens, .chunk_index = chunk_index, .variants = {}};
  ASSIGN_OR_RETURN(const std::vector<uint8_t> tokens, WriteChunkTokens(chunk));
  RETURN_IF_ERROR(store.Put(ChunkObjectName(key, kStateChunkCodec, kTokensLevel), tokens));
  m.variants.push_back({kStateChunkCodec, kTokensLevel, tokens.size()});
  out.bytes += tokens.size();
  if (HasBoundary(chunk)) {
    ASSIGN_OR_RETURN(const std::vector<uint8_t> boundary, WriteChunkBoundary(chunk));
    RETURN_IF_ERROR(store.Put(ChunkObjectName(key, kStateChunkCodec, kBoundaryLevel), boundary));
    m.variants.push_back({kStateChunkCodec, kBoundaryLevel, boundary.size()});
    out.bytes += boundary.size();
  }
  // The manifest last: a reader that finds it finds every object it lists.
  RETURN_IF_ERROR(store.Put(ChunkManifestName(key), WriteChunkManifest(m)));
  out.chunks = 1;
  return out;
}

Result<StoredChunks> StoreSessionStateChunks(Store& store, LlamaSession& session, std::span<const ChunkKey> keys,
                                             uint32_t first, uint32_t chunk_tokens) {
  StoredChunks out;
  for (uint32_t i = first; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(const ChunkState chunk,
                     session.ExtractChunkState(static_cast<int32_t>(i * chunk_tokens), chunk_tokens));
    ASSIGN_OR_RETURN(const StoredChunks one, StoreStateChunk(store, keys[i], i, chunk_tokens, chunk));
    out.chunks += one.chunks;
    out.bytes += one.bytes;
  }
  return out;
}

Result<StoredChunks> StoreStateChunks(Store& store, const SeqState& whole, std::span<const SeqState> snapshots,
                                      std::span<const ChunkKey> keys, uint32_t first, uint32_t chunk_tokens) {
  std::vector<bool> at_boundary(whole.sections.size(), false);
  if (!snapshots.empty()) {
    if (snapshots.size() != keys.size() - std::min<size_t>(first, keys.size())) {
      return InvalidArgument("a snapshot for each chunk to store is needed");
    }
    ASSIGN_OR_RETURN(at_boundary, MatchSnapshotSections(whole, snapshots[0]));
  }
  StoredChunks out;
  const SeqState none{.seq_id = whole.seq_id, .sections = {}};
  for (uint32_t i = first; i < keys.size(); ++i) {
    const SeqState& snapshot = snapshots.empty() ? none : snapshots[i - first];
    ASSIGN_OR_RETURN(const ChunkState chunk, SliceChunk(whole, at_boundary, snapshot, i, chunk_tokens));
    ASSIGN_OR_RETURN(const StoredChunks one, StoreStateChunk(store, keys[i], i, chunk_tokens, chunk));
    out.chunks += one.chunks;
    out.bytes += one.bytes;
  }
  return out;
}

Result<FetchedStatePrefix> FetchStoredStatePrefix(Store& store, std::span<const ChunkKey> keys,
                                                  const PrefixLookup& lookup) {
  FetchedStatePrefix out;
  PrefixRestore& r = out.stats;
  r.lookup_s = lookup.lookup_s;
  r.fallback = lookup.fallback;
  r.damaged = lookup.damaged;
  r.chunks_found = static_cast<uint32_t>(lookup.manifests.size());
  // The run of state chunk manifests whose sizes a chunk can have, checked before anything is
  // read (as the fetcher checks a KV cache chunk's): a manifest is as hostile as any object.
  size_t n = 0;
  std::string bad;
  for (; n < lookup.manifests.size() && n < keys.size(); ++n) {
    const ChunkManifest& m = lookup.manifests[n];
    if (!IsStateChunkManifest(m)) {
      bad = "its manifest lists no state chunk";
      break;
    }
    const uint64_t most = std::max(ListedBytes(m, kTokensLevel), ListedBytes(m, kBoundaryLevel));
    if (most > kDefaultMaxObjectBytes) {
      bad =
          FormatMessage("manifest: a state object of %llu bytes, more than the %llu any may have",
                        static_cast<unsigned long long>(most), static_cast<unsigned long long>(kDefaultMaxObjectBytes));
      break;
    }
  }
  if (!bad.empty() && r.fallback.empty()) {
    r.fallback = FormatMessage("chunk %zu: %s", n, bad.c_str());
    r.damaged = true;
  }
  if (n == 0) return out;

  const auto t_fetch = SteadyClock::now();
  std::vector<std::string> names;
  uint64_t max_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    names.push_back(ChunkObjectName(keys[i], kStateChunkCodec, kTokensLevel));
    max_bytes = std::max(max_bytes, ListedBytes(lookup.manifests[i], kTokensLevel));
  }
  auto got = store.GetMany(names, max_bytes);
  std::vector<ChunkState>& chunks = out.chunks;
  auto stop = [&](size_t i, const std::string& what, const Status& status) {
    r.fallback = FormatMessage("chunk %zu: %s: %s", i, what.c_str(), status.ToString().c_str());
    r.damaged = r.damaged || status.code() == StatusCode::kCorrupt;
  };
  for (size_t i = 0; i < n; ++i) {
    // One bound served the whole batch: each object is held to its own manifest's size too.
    const uint64_t listed = ListedBytes(lookup.manifests[i], kTokensLevel);
    Result<ChunkState> chunk = !got[i].ok() ? Result<ChunkState>(got[i].status())
                               : got[i]->size() > listed
                                   ? Result<ChunkState>(ObjectTooLarge(names[i], got[i]->size(), listed))
                                   : ReadChunkTokens(*got[i]);
    if (chunk.ok() && (chunk->pos_begin != static_cast<int32_t>(i * lookup.manifests[i].chunk_tokens) ||
                       chunk->n_tokens != lookup.manifests[i].chunk_tokens)) {
      chunk = Corrupt("holds other tokens than its name says");
    }
    if (!chunk.ok()) {
      stop(i, "token object", chunk.status());
      break;
    }
    r.bytes += got[i]->size();
    chunks.push_back(std::move(*chunk));
  }
  // The snapshot of the last chunk there is; a missing one shortens the run by a chunk.
  while (!chunks.empty() && HasBoundary(chunks.back())) {
    const size_t last = chunks.size() - 1;
    auto boundary = store.Get(ChunkObjectName(keys[last], kStateChunkCodec, kBoundaryLevel),
                              ListedBytes(lookup.manifests[last], kBoundaryLevel));
    Status read = boundary.status();
    if (boundary.ok()) read = ReadChunkBoundary(*boundary, &chunks.back());
    if (read.ok()) {
      r.bytes += boundary->size();
      break;
    }
    stop(last, "boundary object", read);
    r.bytes -= got[last]->size();
    chunks.pop_back();
  }
  r.fetch_s = SecondsSince(t_fetch);
  r.chunks_fetched = static_cast<uint32_t>(chunks.size());
  r.variants.assign(chunks.size(), std::string(kStateChunkCodec) + "/" + kTokensLevel);
  return out;
}

Result<PrefixRestore> RestoreStoredStatePrefix(Store& store, LlamaSession& session, std::span<const ChunkKey> keys,
                                               const PrefixLookup& lookup) {
  if (session.n_cached() != 0) return InvalidArgument("restoring a prefix needs an empty session");
  ASSIGN_OR_RETURN(FetchedStatePrefix fetched, FetchStoredStatePrefix(store, keys, lookup));
  PrefixRestore& r = fetched.stats;
  if (fetched.chunks.empty()) return r;
  const auto t_restore = SteadyClock::now();
  if (const Status restored = session.RestoreChunks(fetched.chunks); !restored.ok()) {
    // A store is a cache: what llama.cpp will not take is recomputed.
    session.Clear();
    r.fallback = "restore: " + restored.ToString();
    r.chunks_fetched = 0;
    r.variants.clear();
    return r;
  }
  r.restore_s = SecondsSince(t_restore);
  return r;
}

}  // namespace kvc
