#include "reuse/prefix_reuse.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/clock.h"
#include "store/chunk_manifest.h"
#include "store/chunk_tails.h"

namespace kvc {

Result<StorePlan> PlanStoredRungs(const QualityFloor& floor, const std::string& codec) {
  const Codec* requested = FindCodec(codec);
  if (requested == nullptr) return InvalidArgument("unknown codec '" + codec + "'");
  StorePlan plan;
  plan.rungs.push_back({FindCodec("raw"), "fp16"});
  if (codec == "raw") return plan;
  for (const std::string& level : floor.Levels(codec)) plan.rungs.push_back({requested, level});
  if (!floor.from_profile()) {
    // Nothing lossy was measured on this model: the lossless codecs are what saves bytes on a
    // slow link (the floor allows them).
    for (const auto& [name, level] : floor.allowed) {
      const Codec* c = FindCodec(name);
      if (c != nullptr && c != requested && name != "raw") plan.rungs.push_back({c, level});
    }
    return plan;
  }
  if (plan.rungs.size() > 1) return plan;
  // No rung of the codec asked for: the calibration-free ones the profile measured within the floor.
  std::string stored;
  for (const auto& [name, level] :
       {std::pair<std::string, std::string>{"planes", "lossless"}, std::pair<std::string, std::string>{"quant", "8"},
        std::pair<std::string, std::string>{"rotquant", "3"}}) {
    if (!floor.Allows(name, level)) continue;
    plan.rungs.push_back({FindCodec(name), level});
    stored += " and " + name + "/" + level;
  }
  plan.note = "no " + codec + " rung is within the quality floor for this model: storing raw/fp16" + stored + " (" +
              floor.note + ")";
  return plan;
}

bool StoreIsLocal(const Store& store) { return store.url().rfind("redis", 0) != 0; }

std::vector<StoredRung> RungsReadersFetch(const std::vector<StoredRung>& planned, const Store& store, double link_gbps,
                                          bool keep_every_rung) {
  if (keep_every_rung || link_gbps > 0 || !StoreIsLocal(store)) return planned;
  std::vector<StoredRung> raw;
  for (const StoredRung& r : planned) {
    if (r.codec->info().name == "raw") raw.push_back(r);
  }
  return raw.empty() ? planned : raw;
}

size_t FetchPoolThreads(int fetch_threads) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return (fetch_threads > 0 ? static_cast<size_t>(fetch_threads) : cores) + 1;
}

std::vector<ChunkKey> ReusableChunkKeys(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                        uint32_t chunk_tokens) {
  return tokens.empty() ? std::vector<ChunkKey>{} : ChunkKeys(model, tokens.first(tokens.size() - 1), chunk_tokens);
}

FetchOptions ReuseFetchOptions(double link_gbps, double recompute_s, uint32_t chunk_tokens, const ModelInfo& model,
                               const QualityFloor& floor, const Store& store) {
  FetchOptions fo;
  fo.kv_shape = model.KvShapeOf(0);
  fo.allowed = floor.allowed;
  fo.loss = floor.loss;
  fo.recompute_s = recompute_s;
  fo.recompute_tokens = chunk_tokens;
  fo.initial_gbps = link_gbps > 0 ? link_gbps : StoreIsLocal(store) ? 40.0 : 1.0;
  return fo;
}

Result<double> MeasureChunkPrefillSeconds(LlamaSession& session, std::span<const int32_t> probe,
                                          uint32_t chunk_tokens) {
  if (probe.empty()) return InvalidArgument("an empty prefill probe");
  session.Clear();
  const auto t = SteadyClock::now();
  RETURN_IF_ERROR(session.Eval(probe, false));
  const double seconds = SecondsSince(t) / static_cast<double>(probe.size()) * chunk_tokens;
  session.Clear();
  return seconds;
}

Result<PrefillCost> MeasurePrefillCost(LlamaSession& session, const ModelInfo& model, std::span<const int32_t> probe) {
  if (probe.empty()) return InvalidArgument("an empty prefill probe");
  const auto n = static_cast<uint32_t>(probe.size());
  double shallow_s = 0;
  bool one_cache = false;
  for (int pass = 0; pass < 2; ++pass) {
    session.Clear();
    const auto t = SteadyClock::now();
    RETURN_IF_ERROR(session.Eval(probe, false));
    shallow_s = SecondsSince(t);
  }
  // Only a memory that is one KV cache takes restored KV (llama.cpp aborts on another's state),
  // which only a sequence holding tokens can tell.
  const Result<bool> kind = session.MemoryIsOneKvCache(0);
  one_cache = kind.ok() && *kind;
  session.Clear();
  const double shallow = shallow_s / n;  // a token's price at mean position n / 2
  const PrefillCost flat{shallow, 0};
  // Restored zeros cost what any KV costs to attend to; bounded in bytes like the warm-up's.
  constexpr uint64_t kDeepest = 2048, kMostBytes = uint64_t{32} << 20;
  const uint64_t per_token = model.KvShapeOf(1).fp16_bytes();
  const uint64_t n_ctx = session.options().n_ctx;
  if (!one_cache || per_token == 0 || n_ctx < 2 * uint64_t{n}) return flat;
  const auto deep = static_cast<uint32_t>(std::min({kDeepest, n_ctx - 2 * uint64_t{n}, kMostBytes / per_token}));
  if (deep < 4 * n) return flat;
  ASSIGN_OR_RETURN(const KvCache zeros, KvCache::Create(model.KvShapeOf(deep), DType::kF16));
  RETURN_IF_ERROR(session.RestoreSeqKv(0, zeros.View()));
  double deep_s = 0;
  for (uint32_t pass = 0; pass < 2; ++pass) {
    const SeqTokens at{0, static_cast<int32_t>(deep + pass * n), probe};
    const auto t = SteadyClock::now();
    const Status decoded = session.DecodeBatch(std::span(&at, 1));
    deep_s = SecondsSince(t);
    if (!decoded.ok()) {
      session.Clear();
      return decoded;
    }
  }
  session.Clear();
  // Two points of tokens * (a + b * mean position): at n / 2 and at deep + n + n / 2.
  const double slope = std::max(0.0, (deep_s / n - shallow) / (deep + n));
  return PrefillCost{std::max(0.0, shallow - slope * n / 2), slope};
}

PrefixLookup LookupStoredPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                std::span<const int32_t> reusable, uint32_t chunk_tokens) {
  PrefixLookup out;
  const bool tails = !reusable.empty() && chunk_tokens > 1;
  if (keys.empty() && !tails) return out;
  const auto t_lookup = SteadyClock::now();
  std::vector<std::string> names;
  for (const ChunkKey& k : keys) names.push_back(ChunkManifestName(k));
  // The tails list after every chunk the run may end at, in the same round trip: which one is
  // needed is known only once the manifests are.
  for (size_t i = 0; tails && i <= keys.size(); ++i) names.push_back(ChunkTailsName(PreviousChunkKey(model, keys, i)));
  // Bounded by the largest manifest or tails list: a huge object under such a name is refused unread.
  const auto got = store.GetMany(
      names, tails ? std::max(kMaxChunkManifestBytes, MaxChunkTailsBytes(chunk_tokens)) : kMaxChunkManifestBytes);
  bool run_ended_cleanly = true;  // at a missing manifest or the last key, not at a failure
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!got[i].ok()) {
      if (got[i].status().code() != StatusCode::kNotFound) {
        out.fallback = FormatMessage("chunk %zu: manifest: %s", i, got[i].status().ToString().c_str());
        out.damaged = got[i].status().code() == StatusCode::kCorrupt;
        run_ended_cleanly = false;
      }
      break;
    }
    auto m = ReadChunkManifest(*got[i]);
    if (!m.ok() || m->chunk_tokens != chunk_tokens || m->chunk_index != i) {
      out.damaged = true;
      out.fallback = FormatMessage("chunk %zu: manifest unusable: %s", i,
                                   m.ok() ? "chunk size or index differs" : m.status().ToString().c_str());
      run_ended_cleanly = false;
      break;
    }
    out.manifests.push_back(std::move(*m));
  }
  const size_t run = out.manifests.size();
  if (tails && run_ended_cleanly && uint64_t{run} * chunk_tokens < reusable.size()) {
    const Result<std::vector<uint8_t>>& list_bytes = got[keys.size() + run];
    if (!list_bytes.ok()) {
      if (list_bytes.status().code() != StatusCode::kNotFound) {
        out.fallback = FormatMessage("tails after chunk %zu: %s", run, list_bytes.status().ToString().c_str());
        out.damaged = list_bytes.status().code() == StatusCode::kCorrupt;
      }
    } else if (auto list = ReadChunkTails(*list_bytes);
               !list.ok() || list->chunk_tokens != chunk_tokens || list->chunk_index != run) {
      out.damaged = true;
      out.fallback = FormatMessage("tails after chunk %zu unusable: %s", run,
                                   list.ok() ? "chunk size or index differs" : list.status().ToString().c_str());
    } else if (auto best = BestChunkTail(*list, reusable.subspan(run * chunk_tokens))) {
      ChunkTail& tail = list->tails[best->index];
      out.tail = StoredTail{.key = ChunkTailKey(PreviousChunkKey(model, keys, run), tail.tokens),
                            .manifest = {.chunk_tokens = static_cast<uint32_t>(tail.tokens.size()),
                                         .chunk_index = static_cast<uint32_t>(run),
                                         .variants = std::move(tail.variants)},
                            .tokens = best->tokens};
    }
  }
  out.lookup_s = SecondsSince(t_lookup);
  return out;
}

namespace {

// FetchLookedUpPrefix; with `through_slots` the chunks decode through a few chunk-sized buffers
// (Fetcher::RunThroughSlots) and the result holds no KV, for a caller that takes every chunk in
// on_chunk.
Result<FetchedPrefix> FetchPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                  PrefixLookup lookup, const CodecContext& codec_context, LinkShaper& link,
                                  const FetchOptions& options, const std::function<Status(const KvView&)>& on_chunk,
                                  bool through_slots, KvCache buffer, uint32_t first_chunk) {
  FetchedPrefix out;
  PrefixRestore& r = out.stats;
  r.lookup_s = lookup.lookup_s;
  r.fallback = std::move(lookup.fallback);
  r.damaged = lookup.damaged;
  r.chunks_found = static_cast<uint32_t>(lookup.manifests.size());
  if (lookup.manifests.empty() && !lookup.tail) return out;
  if (lookup.manifests.size() > keys.size()) return InvalidArgument("more manifests than chunk keys");
  if (!options.kv_shape) return InvalidArgument("fetching a prefix needs the model's KV shape");
  const size_t whole = lookup.manifests.size();
  if (first_chunk > whole) return InvalidArgument("the run starts after its last whole chunk");
  if (first_chunk > 0 && through_slots) return InvalidArgument("a split run decodes into one buffer");
  // The tail goes last in the run: the fetcher places each chunk after the ones before it.
  std::vector<ChunkKey> run_keys(keys.begin() + first_chunk, keys.begin() + static_cast<std::ptrdiff_t>(whole));
  uint32_t tail_used = 0;
  if (lookup.tail) {
    run_keys.push_back(lookup.tail->key);
    tail_used = lookup.tail->tokens;
    lookup.manifests.push_back(std::move(lookup.tail->manifest));
  }
  out.chunk_tokens = whole > 0 ? lookup.manifests[0].chunk_tokens : 0;
  r.first_chunk = first_chunk;
  // A whole chunk's slot holds the tail too.
  const uint32_t slot_tokens = whole > 0 ? out.chunk_tokens : lookup.manifests.back().chunk_tokens;

  const auto t_fetch = SteadyClock::now();
  KvShape shape = *options.kv_shape;
  uint64_t tokens = 0;
  for (const ChunkManifest& m : lookup.manifests) tokens += m.chunk_tokens;
  if (tokens > kMaxTokens) {
    return InvalidArgument(FormatMessage("a stored prefix of %llu tokens is longer than any KV cache",
                                         static_cast<unsigned long long>(tokens)));
  }
  // The chunks before the first to fetch only take their place in the buffer.
  const std::span<const ChunkManifest> run_manifests = std::span(lookup.manifests).subspan(first_chunk);
  const uint32_t fetched_whole = static_cast<uint32_t>(whole) - first_chunk;
  Fetcher fetcher(store, link, model, codec_context, options);
  auto deliver = [&](FetchedChunk&& c) -> Status {
    r.variants.push_back(c.variant.codec + "/" + c.variant.level);
    r.max_chunk_decode_s = std::max(r.max_chunk_decode_s, c.decode_s);
    if (c.from_memory) r.memory_tokens += c.index == fetched_whole ? tail_used : out.chunk_tokens;
    if (!on_chunk) return Status::Ok();
    // Of the tail, only the tokens the request agrees with.
    KvView kv = c.kv;
    if (c.index == fetched_whole) {
      ASSIGN_OR_RETURN(kv, c.kv.View(0, tail_used));
    }
    const auto t_restore = SteadyClock::now();
    const Status s = on_chunk(kv);
    r.restore_s += SecondsSince(t_restore);
    return s;
  };
  const std::span<const ChunkKey> fetched_keys = run_keys;
  Result<FetchReport> report = Internal("not fetched");
  if (through_slots) {
    shape.n_tokens = slot_tokens;
    std::vector<KvCache> slots(fetcher.Inflight());
    for (KvCache& slot : slots) {
      ASSIGN_OR_RETURN(slot, KvCache::CreateForOverwrite(shape, DType::kF16));
    }
    report = fetcher.RunThroughSlots(fetched_keys, run_manifests, slots, deliver);
  } else {
    // One buffer for the longest run there is, allocated once (or the caller's): every chunk
    // decodes into its place. Only fetched chunks' tokens are ever read, each after its decode
    // wrote it.
    shape.n_tokens = static_cast<uint32_t>(tokens);
    const KvShape& given = buffer.shape();
    if (buffer.dtype() == DType::kF16 && given.n_layers == shape.n_layers && given.n_kv_heads == shape.n_kv_heads &&
        given.head_dim == shape.head_dim && given.keys_only == shape.keys_only && given.n_tokens >= tokens) {
      out.kv = std::move(buffer);
      out.kv.set_pos_begin(0);
    } else {
      ASSIGN_OR_RETURN(out.kv, KvCache::CreateForOverwrite(shape, DType::kF16));
    }
    report = fetcher.Run(fetched_keys, run_manifests, out.kv, deliver,
                         static_cast<int32_t>(uint64_t{first_chunk} * out.chunk_tokens));
  }
  RETURN_IF_ERROR(report.status());
  r.fetch_s = SecondsSince(t_fetch);
  r.decode_s = report->decode_s;
  r.bytes = report->bytes;
  r.chunks_fetched = std::min(report->chunks, fetched_whole);
  r.tail_tokens = report->chunks > fetched_whole ? tail_used : 0;
  if (!report->stop_reason.empty()) r.fallback = report->stop_reason;
  r.damaged = r.damaged || report->stopped_on_damage;
  return out;
}

}  // namespace

Result<FetchedPrefix> FetchLookedUpPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                          PrefixLookup lookup, const CodecContext& codec_context, LinkShaper& link,
                                          const FetchOptions& options,
                                          const std::function<Status(const KvView&)>& on_chunk, KvCache buffer,
                                          uint32_t first_chunk) {
  return FetchPrefix(store, model, keys, std::move(lookup), codec_context, link, options, on_chunk, false,
                     std::move(buffer), first_chunk);
}

Result<FetchedPrefix> FetchStoredPrefix(Store& store, const ModelFingerprint& model, std::span<const ChunkKey> keys,
                                        std::span<const int32_t> reusable, uint32_t chunk_tokens,
                                        const CodecContext& codec_context, LinkShaper& link,
                                        const FetchOptions& options,
                                        const std::function<Status(const KvView&)>& on_chunk) {
  return FetchLookedUpPrefix(store, model, keys, LookupStoredPrefix(store, model, keys, reusable, chunk_tokens),
                             codec_context, link, options, on_chunk);
}

Result<PrefixRestore> RestoreStoredPrefix(Store& store, LlamaSession& session, const ModelFingerprint& model,
                                          std::span<const ChunkKey> keys, std::span<const int32_t> reusable,
                                          uint32_t chunk_tokens, const CodecContext& codec_context, LinkShaper& link,
                                          const FetchOptions& options) {
  return RestoreLookedUpPrefix(store, session, model, keys,
                               LookupStoredPrefix(store, model, keys, reusable, chunk_tokens), codec_context, link,
                               options);
}

Result<PrefixRestore> RestoreLookedUpPrefix(Store& store, LlamaSession& session, const ModelFingerprint& model,
                                            std::span<const ChunkKey> keys, PrefixLookup lookup,
                                            const CodecContext& codec_context, LinkShaper& link,
                                            const FetchOptions& options) {
  if (session.n_cached() != 0) return InvalidArgument("restoring a prefix needs an empty session");
  // Each chunk goes into llama.cpp as it arrives, so none needs a place of its own for the run.
  ASSIGN_OR_RETURN(FetchedPrefix fetched,
                   FetchPrefix(
                       store, model, keys, std::move(lookup), codec_context, link, options,
                       [&](const KvView& chunk) { return session.AppendKv(chunk); }, true, {}, 0));
  return fetched.stats;
}

Result<StoredChunks> StoreSessionChunks(Store& store, LlamaSession& session, std::span<const int32_t> held,
                                        size_t prompt_reusable, uint32_t first, uint32_t chunk_tokens,
                                        const std::vector<StoredRung>& rungs, const ModelFingerprint& model,
                                        const CodecContext& codec_context) {
  KvCache chunk;
  const ChunkKvSource chunk_kv = [&](uint32_t token_begin, uint32_t n_tokens) -> Result<KvView> {
    ASSIGN_OR_RETURN(chunk, session.ExtractKvRange(static_cast<int32_t>(token_begin), n_tokens));
    return chunk.View();
  };
  return StoreHeldChunks(store, chunk_kv, held, prompt_reusable, first, chunk_tokens, rungs, model, codec_context);
}

}  // namespace kvc
