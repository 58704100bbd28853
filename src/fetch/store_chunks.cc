#include "fetch/store_chunks.h"

#include "base/log.h"
#include "store/chunk_manifest.h"
#include "store/chunk_tails.h"

namespace kvc {
namespace {

// Every rung of `view`, stored under `key`'s object names; the variants written.
Result<std::vector<ChunkVariant>> StoreVariants(Store& store, const KvView& view, const ChunkKey& key,
                                                uint32_t first_token, const std::vector<StoredRung>& rungs,
                                                const ModelFingerprint& model, const CodecContext& codec_context,
                                                bool skip_failed_rungs, uint64_t* bytes_out) {
  std::vector<ChunkVariant> variants;
  for (const StoredRung& rung : rungs) {
    const std::string& codec_name = rung.codec->info().name;
    auto bytes = EncodeKvc(*rung.codec, view, {.level = rung.level, .params = {}}, model, first_token, codec_context);
    if (!bytes.ok() && skip_failed_rungs) {
      // A few tokens are too few for some codecs' tables: the tail goes without that rung.
      KVC_LOG_DEBUG("a tail of %u tokens is not stored as %s/%s: %s", view.shape().n_tokens, codec_name.c_str(),
                    rung.level.c_str(), bytes.status().ToString().c_str());
      continue;
    }
    RETURN_IF_ERROR(bytes.status());
    RETURN_IF_ERROR(store.Put(ChunkObjectName(key, codec_name, rung.level), *bytes));
    variants.push_back({codec_name, rung.level, bytes->size()});
    *bytes_out += bytes->size();
  }
  return variants;
}

}  // namespace

std::vector<std::string> RungNames(const std::vector<StoredRung>& rungs) {
  std::vector<std::string> names;
  for (const StoredRung& r : rungs) names.push_back(r.codec->info().name + "/" + r.level);
  return names;
}

Result<StoredChunks> StoreChunks(Store& store, const KvView& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const Codec& codec, const std::vector<std::string>& levels,
                                 const ModelFingerprint& model, const CodecContext& codec_context) {
  std::vector<StoredRung> rungs;
  for (const std::string& level : levels) rungs.push_back({&codec, level});
  return StoreChunks(store, kv, keys, first, chunk_tokens, rungs, model, codec_context);
}

Result<StoredChunks> StoreChunks(Store& store, const KvView& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context,
                                 std::span<const int32_t> tail) {
  const ChunkKvSource chunk_kv = [&](uint32_t token_begin, uint32_t n_tokens) {
    return kv.View(token_begin, n_tokens);
  };
  return StoreChunks(store, chunk_kv, keys, first, chunk_tokens, rungs, model, codec_context, tail);
}

Result<StoredChunks> StoreChunks(Store& store, const ChunkKvSource& chunk_kv, std::span<const ChunkKey> keys,
                                 uint32_t first, uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context,
                                 std::span<const int32_t> tail) {
  StoredChunks out;
  for (uint32_t i = first; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(const KvView view, chunk_kv(i * chunk_tokens, chunk_tokens));
    ChunkManifest m{.chunk_tokens = chunk_tokens, .chunk_index = i, .variants = {}};
    ASSIGN_OR_RETURN(m.variants, StoreVariants(store, view, keys[i], i * chunk_tokens, rungs, model, codec_context,
                                               false, &out.bytes));
    // The manifest last: a reader that finds it finds every variant it lists.
    RETURN_IF_ERROR(store.Put(ChunkManifestName(keys[i]), WriteChunkManifest(m)));
    ++out.chunks;
  }
  if (tail.empty()) return out;
  if (tail.size() >= chunk_tokens) return InvalidArgument("a tail of a whole chunk or more");
  const auto index = static_cast<uint32_t>(keys.size());
  const ChunkKey previous = PreviousChunkKey(model, keys, index);
  const std::string list_name = ChunkTailsName(previous);
  ChunkTails list{.chunk_tokens = chunk_tokens, .chunk_index = index, .tails = {}};
  if (auto bytes = store.Get(list_name, MaxChunkTailsBytes(chunk_tokens)); bytes.ok()) {
    // A damaged list, or one for another chunk size, is replaced: the store is a cache.
    if (auto read = ReadChunkTails(*bytes);
        read.ok() && read->chunk_tokens == chunk_tokens && read->chunk_index == index) {
      list = std::move(*read);
    }
  } else if (bytes.status().code() != StatusCode::kNotFound && bytes.status().code() != StatusCode::kCorrupt) {
    return bytes.status();
  }
  ChunkTail entry{.tokens = std::vector<int32_t>(tail.begin(), tail.end()), .variants = {}};
  if (!AddChunkTail(list, entry)) return out;  // stored already, as it is or inside a longer tail
  ASSIGN_OR_RETURN(const KvView view, chunk_kv(index * chunk_tokens, static_cast<uint32_t>(tail.size())));
  ASSIGN_OR_RETURN(list.tails.front().variants,
                   StoreVariants(store, view, ChunkTailKey(previous, tail), index * chunk_tokens, rungs, model,
                                 codec_context, true, &out.bytes));
  // The list last, as a manifest: a reader that finds the tail finds its objects.
  if (list.tails.front().variants.empty()) return out;
  RETURN_IF_ERROR(store.Put(list_name, WriteChunkTails(list)));
  out.tail_tokens = static_cast<uint32_t>(tail.size());
  return out;
}

Result<StoredChunks> StoreHeldChunks(Store& store, const ChunkKvSource& chunk_kv, std::span<const int32_t> held,
                                     size_t prompt_reusable, uint32_t first, uint32_t chunk_tokens,
                                     const std::vector<StoredRung>& rungs, const ModelFingerprint& model,
                                     const CodecContext& codec_context) {
  const std::vector<ChunkKey> keys = ChunkKeys(model, held, chunk_tokens);
  const size_t whole = keys.size() * chunk_tokens;
  ASSIGN_OR_RETURN(StoredChunks out, StoreChunks(store, chunk_kv, keys, first, chunk_tokens, rungs, model,
                                                 codec_context, held.subspan(whole)));
  const size_t prompt_chunks = std::min(prompt_reusable, held.size()) / chunk_tokens;
  const size_t prompt_tail = std::min(prompt_reusable, held.size()) - prompt_chunks * chunk_tokens;
  if (prompt_chunks < keys.size() && prompt_tail > 0) {
    // The prompt's chunks are the first of keys (the same tokens hash the same).
    ASSIGN_OR_RETURN(const StoredChunks tail,
                     StoreChunks(store, chunk_kv, std::span(keys).first(prompt_chunks),
                                 static_cast<uint32_t>(prompt_chunks), chunk_tokens, rungs, model, codec_context,
                                 held.subspan(prompt_chunks * chunk_tokens, prompt_tail)));
    out.bytes += tail.bytes;
  }
  return out;
}

}  // namespace kvc
