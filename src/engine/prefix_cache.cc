#include "engine/prefix_cache.h"

#include <algorithm>
#include <chrono>

#include "base/clock.h"
#include "store/chunk_manifest.h"

namespace kvc {

std::vector<std::string> StoredLevels(const std::string& codec) {
  if (codec == "raw") return {"fp16"};
  if (codec == "quant") return {"8", "4"};
  if (codec == "kvtc") return {"8", "16", "24", "32"};
  if (codec == "cachegen") return {"high", "medium", "low"};
  if (codec == "video") return {"8", "6", "4"};
  return {};
}

std::vector<std::pair<std::string, std::string>> QualityFloor() {
  std::vector<std::pair<std::string, std::string>> allowed;
  for (const Codec* c : AllCodecs()) {
    for (const std::string& level : StoredLevels(c->info().name)) allowed.emplace_back(c->info().name, level);
  }
  return allowed;
}

std::vector<ChunkKey> ReusableChunkKeys(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                        uint32_t chunk_tokens) {
  return tokens.empty() ? std::vector<ChunkKey>{} : ChunkKeys(model, tokens.first(tokens.size() - 1), chunk_tokens);
}

FetchOptions ReuseFetchOptions(double link_gbps, double recompute_s, const ModelInfo& model) {
  FetchOptions fo;
  fo.kv_shape = KvShape{.n_layers = model.n_layers, .n_kv_heads = model.n_kv_heads, .head_dim = model.head_dim};
  fo.allowed = QualityFloor();
  fo.recompute_s = recompute_s;
  fo.initial_gbps = link_gbps > 0 ? link_gbps : 1.0;
  return fo;
}

Result<double> MeasureChunkPrefillSeconds(LlamaSession& session, std::span<const int32_t> probe, uint32_t chunk_tokens) {
  if (probe.empty()) return InvalidArgument("an empty prefill probe");
  session.Clear();
  const auto t = SteadyClock::now();
  RETURN_IF_ERROR(session.Eval(probe, false));
  const double seconds = SecondsSince(t) / static_cast<double>(probe.size()) * chunk_tokens;
  session.Clear();
  return seconds;
}

PrefixLookup LookupStoredPrefix(Store& store, std::span<const ChunkKey> keys, uint32_t chunk_tokens) {
  PrefixLookup out;
  if (keys.empty()) return out;
  const auto t_lookup = SteadyClock::now();
  std::vector<std::string> names;
  for (const ChunkKey& k : keys) names.push_back(ChunkManifestName(k));
  const auto got = store.GetMany(names);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!got[i].ok()) {
      if (got[i].status().code() != StatusCode::kNotFound) {
        out.fallback = FormatMessage("chunk %zu: manifest: %s", i, got[i].status().ToString().c_str());
        out.damaged = got[i].status().code() == StatusCode::kCorrupt;
      }
      break;
    }
    auto m = ReadChunkManifest(*got[i]);
    if (!m.ok() || m->chunk_tokens != chunk_tokens || m->chunk_index != i) {
      out.damaged = true;
      out.fallback = FormatMessage("chunk %zu: manifest unusable: %s", i,
                                   m.ok() ? "chunk size or index differs" : m.status().ToString().c_str());
      break;
    }
    out.manifests.push_back(std::move(*m));
  }
  out.lookup_s = SecondsSince(t_lookup);
  return out;
}

Result<FetchedPrefix> FetchLookedUpPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                          PrefixLookup lookup, const CodecContext& codec_context, LinkShaper& link,
                                          const FetchOptions& options) {
  FetchedPrefix out;
  PrefixRestore& r = out.stats;
  r.lookup_s = lookup.lookup_s;
  r.fallback = std::move(lookup.fallback);
  r.damaged = lookup.damaged;
  r.chunks_found = static_cast<uint32_t>(lookup.manifests.size());
  if (lookup.manifests.empty()) return out;
  if (lookup.manifests.size() > keys.size()) return InvalidArgument("more manifests than chunk keys");

  const auto t_fetch = SteadyClock::now();
  Fetcher fetcher(store, link, model, codec_context, options);
  auto report = fetcher.Run(keys.first(lookup.manifests.size()), lookup.manifests, [&](FetchedChunk&& c) -> Status {
    r.variants.push_back(c.variant.codec + "/" + c.variant.level);
    r.max_chunk_decode_s = std::max(r.max_chunk_decode_s, c.decode_s);
    if (c.index == 0) {
      out.kv = std::move(c.kv);
      return Status::Ok();
    }
    return out.kv.Append(c.kv.View());
  });
  RETURN_IF_ERROR(report.status());
  r.fetch_s = SecondsSince(t_fetch);
  r.decode_s = report->decode_s;
  r.bytes = report->bytes;
  r.chunks_fetched = report->chunks;
  if (!report->stop_reason.empty()) r.fallback = report->stop_reason;
  r.damaged = r.damaged || report->stopped_on_damage;
  return out;
}

Result<FetchedPrefix> FetchStoredPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                        uint32_t chunk_tokens, const CodecContext& codec_context, LinkShaper& link,
                                        const FetchOptions& options) {
  return FetchLookedUpPrefix(store, model, keys, LookupStoredPrefix(store, keys, chunk_tokens), codec_context, link,
                             options);
}

Result<PrefixRestore> RestoreStoredPrefix(Store& store, LlamaSession& session, const ModelFingerprint& model,
                                          std::span<const ChunkKey> keys, uint32_t chunk_tokens,
                                          const CodecContext& codec_context, LinkShaper& link,
                                          const FetchOptions& options) {
  ASSIGN_OR_RETURN(FetchedPrefix fetched,
                   FetchStoredPrefix(store, model, keys, chunk_tokens, codec_context, link, options));
  if (fetched.stats.chunks_fetched > 0) {
    const auto t_restore = SteadyClock::now();
    RETURN_IF_ERROR(session.RestoreKv(fetched.kv));
    fetched.stats.restore_s = SecondsSince(t_restore);
  }
  return fetched.stats;
}

Result<StoredChunks> StoreChunks(Store& store, const KvCache& kv, std::span<const ChunkKey> keys, uint32_t first,
                                 uint32_t chunk_tokens, const Codec& codec, const std::vector<std::string>& levels,
                                 const ModelFingerprint& model, const CodecContext& codec_context) {
  StoredChunks out;
  const std::string& codec_name = codec.info().name;
  for (uint32_t i = first; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(KvView view, kv.View(i * chunk_tokens, chunk_tokens));
    ChunkManifest m{.chunk_tokens = chunk_tokens, .chunk_index = i, .variants = {}};
    for (const std::string& level : levels) {
      ASSIGN_OR_RETURN(auto bytes, EncodeKvc(codec, view, {.level = level, .params = {}}, model, i * chunk_tokens,
                                             codec_context));
      RETURN_IF_ERROR(store.Put(ChunkObjectName(keys[i], codec_name, level), bytes));
      m.variants.push_back({codec_name, level, bytes.size()});
      out.bytes += bytes.size();
    }
    // The manifest last: a reader that finds it finds every variant it lists.
    RETURN_IF_ERROR(store.Put(ChunkManifestName(keys[i]), WriteChunkManifest(m)));
    ++out.chunks;
  }
  return out;
}

}  // namespace kvc
