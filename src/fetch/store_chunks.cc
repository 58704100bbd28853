#include "fetch/store_chunks.h"

#include "store/chunk_manifest.h"

namespace kvc {

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
                                 const ModelFingerprint& model, const CodecContext& codec_context) {
  const ChunkKvSource chunk_kv = [&](uint32_t i) { return kv.View(i * chunk_tokens, chunk_tokens); };
  return StoreChunks(store, chunk_kv, keys, first, chunk_tokens, rungs, model, codec_context);
}

Result<StoredChunks> StoreChunks(Store& store, const ChunkKvSource& chunk_kv, std::span<const ChunkKey> keys,
                                 uint32_t first, uint32_t chunk_tokens, const std::vector<StoredRung>& rungs,
                                 const ModelFingerprint& model, const CodecContext& codec_context) {
  StoredChunks out;
  for (uint32_t i = first; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(const KvView view, chunk_kv(i));
    ChunkManifest m{.chunk_tokens = chunk_tokens, .chunk_index = i, .variants = {}};
    for (const StoredRung& rung : rungs) {
      const std::string& codec_name = rung.codec->info().name;
      ASSIGN_OR_RETURN(auto bytes, EncodeKvc(*rung.codec, view, {.level = rung.level, .params = {}}, model,
                                             i * chunk_tokens, codec_context));
      RETURN_IF_ERROR(store.Put(ChunkObjectName(keys[i], codec_name, rung.level), bytes));
      m.variants.push_back({codec_name, rung.level, bytes.size()});
      out.bytes += bytes.size();
    }
    // The manifest last: a reader that finds it finds every variant it lists.
    RETURN_IF_ERROR(store.Put(ChunkManifestName(keys[i]), WriteChunkManifest(m)));
    ++out.chunks;
  }
  return out;
}

}  // namespace kvc
