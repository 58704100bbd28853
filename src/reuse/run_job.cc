#include "reuse/run_job.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "base/clock.h"
#include "base/log.h"
#include "base/report_json.h"
#include "base/thread_pool.h"
#include "base/utf8.h"
#include "llama/llama_session.h"
#include "llama/model_files.h"
#include "reuse/prefix_reuse.h"
#include "reuse/reuse_setup.h"
#include "reuse/state_chunks.h"

namespace kvc {
namespace {

// Tokens prefilled to measure this machine's prefill speed, which prices "recompute" for the
// level planner.
constexpr uint32_t kProbeTokens = 64;

// Also logged, so a caller that only reads the text still sees on stderr why nothing was reused.
void Warn(RunReport& r, std::string message) {
  KVC_LOG_WARN("%s", PrintableOneLine(message).c_str());
  r.warnings.push_back(std::move(message));
}

}  // namespace

Result<RunReport> RunJob(const RunOptions& o) {
  RunReport r;
  r.codec = o.codec;
  r.link_gbps = o.link_gbps;
  // Every option is checked once, before anything is loaded: the sampling settings here, the rest
  // by the reuse set-up. What follows trusts them.
  RETURN_IF_ERROR(CheckSamplingParams(o.sampling));
  ReuseSetupOptions setup_options = ReuseSetupOptionsOf(o);
  setup_options.store = o.reuse || o.store_new_chunks ? StoreOpening::kOnce : StoreOpening::kNone;
  // The prompt is the model's to read: checked before the calibration, the floor and the store.
  std::vector<int32_t> tokens = o.prompt_tokens;
  setup_options.check_model = [&](const LlamaModel& model) -> Status {
    if (tokens.empty()) {
      ASSIGN_OR_RETURN(tokens, model.Tokenize(o.prompt, true));
    } else {
      for (const int32_t id : tokens) {
        if (id < 0 || static_cast<uint32_t>(id) >= model.info().n_vocab) {
          return InvalidArgument(
              FormatMessage("token id %d is not in the model's vocabulary of %u", id, model.info().n_vocab));
        }
      }
    }
    const bool starts_with_bos = model.has_bos() && !tokens.empty() && tokens.front() == model.bos_token();
    if (tokens.size() <= (starts_with_bos ? 1u : 0u)) return InvalidArgument("the prompt is empty");
    return CheckWithinTrainingContext(model.info(), tokens.size() + uint64_t{o.n_generate},
                                      FormatMessage("the prompt and %u tokens to generate", o.n_generate));
  };

  const auto t_load = SteadyClock::now();
  ASSIGN_OR_RETURN(ReuseSetup setup, SetUpReuse(setup_options));
  const std::unique_ptr<LlamaModel>& model = setup.model;
  CalibrationRegistry& calibrations = *setup.calibrations;
  const QualityFloor& floor = setup.plan.floor;
  const std::unique_ptr<Store>& store = setup.store;
  // Said once, in the report: the CLI prints it, and a C API caller reads it from the JSON.
  r.quality_floor = floor.note;
  r.stored_levels = RungNames(setup.plan.rungs);
  r.store = setup.store_url;
  r.warnings = setup.warnings;  // logged already
  r.prompt_tokens = static_cast<uint32_t>(tokens.size());
  SessionOptions so;
  so.n_ctx = r.prompt_tokens + o.n_generate + 8;
  so.n_threads = o.threads;
  // Bounds llama.cpp's attention scratch during a long prefill (the same KV, bit for bit).
  so.n_ubatch = BoundedUbatch(model->info(), so);
  so.require_kv = true;
  ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));
  const std::span<const int32_t> probe = std::span(tokens).first(std::min<size_t>(kProbeTokens, tokens.size()));
  double recompute_s = 0;  // never: every stored chunk is fetched
  if (o.plan_recompute) {
    ASSIGN_OR_RETURN(recompute_s, MeasureChunkPrefillSeconds(*session, probe, o.chunk_tokens));
  }
  r.load_s = SecondsSince(t_load);

  const std::vector<ChunkKey> keys = ReusableChunkKeys(model->fingerprint(), tokens, o.chunk_tokens);
  r.chunks_reusable = static_cast<uint32_t>(keys.size());

  // Fetch, decode and encode share one pool; chunks decode side by side, one per worker.
  ThreadPool pool(FetchPoolThreads(o.fetch_threads));
  const auto t_request = SteadyClock::now();
  const CodecContext codec_context{&calibrations, &model->fingerprint(), nullptr};
  if (o.reuse && store != nullptr) {
    LinkShaper link(LinkShaper::GbpsToBytesPerSecond(o.link_gbps));
    FetchOptions fetch_options =
        ReuseFetchOptions(o.link_gbps, recompute_s, o.chunk_tokens, model->info(), floor, *store);
    fetch_options.pool = &pool;
    // Every token but the last (its logits give the first generated token) may come from the
    // store: the whole chunks, then a stored tail.
    PrefixLookup lookup = LookupStoredPrefix(*store, model->fingerprint(), keys,
                                             std::span(tokens).first(tokens.size() - 1), o.chunk_tokens);
    // What the chunks are stored as says how they are restored: state chunks for memories that
    // are not one KV cache, codec rungs for the others.
    const bool state_chunks = !lookup.manifests.empty() && IsStateChunkManifest(lookup.manifests[0]);
    auto restored = state_chunks ? RestoreStoredStatePrefix(*store, *session, keys, lookup)
                                 : RestoreLookedUpPrefix(*store, *session, model->fingerprint(), keys,
                                                         std::move(lookup), codec_context, link, fetch_options);
    // The fetcher turns a missing or damaged chunk into a shorter prefix; an error here (a
    // restore llama.cpp refused) leaves nothing trustworthy in the session: start over.
    if (!restored.ok()) {
      Warn(r, "reuse failed, recomputing the whole prompt: " + restored.status().ToString());
      session->Clear();
      restored = PrefixRestore{};
    }
    const PrefixRestore& p = *restored;
    r.chunks_found = p.chunks_found;
    r.chunks_fetched = p.chunks_fetched;
    r.tail_tokens = p.tail_tokens;
    r.reused_tokens = p.chunks_fetched * o.chunk_tokens + p.tail_tokens;
    r.fallback = p.fallback;
    r.damaged = p.damaged;
    r.variants = p.variants;
    r.bytes_fetched = p.bytes;
    r.lookup_s = p.lookup_s;
    r.fetch_s = p.fetch_s;
    r.decode_s = p.decode_s;
    r.restore_s = p.restore_s;
  }

  const auto t_prefill = SteadyClock::now();
  std::span<const int32_t> rest = std::span(tokens).subspan(r.reused_tokens);
  r.prefilled_tokens = static_cast<uint32_t>(rest.size());
  // A memory that keeps a sliding window or a recurrent state is prefilled a chunk at a time, each
  // new chunk taken (in memory) as it ends: its snapshot is of that moment. Stored after the
  // response, as other chunks.
  const bool snapshots = model->info().SnapshotsAtChunkEnds();
  std::vector<ChunkState> taken;
  if (snapshots && o.store_new_chunks && store != nullptr) {
    for (uint32_t c = r.chunks_fetched; c < keys.size(); ++c) {
      const auto chunk_tokens = std::span(tokens).subspan(size_t{c} * o.chunk_tokens, o.chunk_tokens);
      RETURN_IF_ERROR(session->Eval(chunk_tokens, false));
      rest = rest.subspan(o.chunk_tokens);
      auto chunk = session->ExtractChunkState(static_cast<int32_t>(c * o.chunk_tokens), o.chunk_tokens);
      if (!chunk.ok()) {
        Warn(r, "taking the prompt's chunks failed, they are not kept: " + chunk.status().ToString());
        taken.clear();
        break;  // the rest is prefilled at once below
      }
      taken.push_back(std::move(*chunk));
    }
  }
  RETURN_IF_ERROR(session->Eval(rest, false));
  r.llama_state_bytes = session->StateBlobBytes();
  ASSIGN_OR_RETURN(auto sampler, TokenSampler::Create(o.sampling, session->n_vocab(), so.n_ctx));
  int32_t next = sampler->Sample(session->Logits(-1));
  r.prefill_s = SecondsSince(t_prefill);
  r.ttft_s = SecondsSince(t_request);

  const auto t_generate = SteadyClock::now();
  // A token's piece may be part of a character (byte-fallback tokens): the text is joined as
  // valid UTF-8, and a character the last token left incomplete becomes U+FFFD.
  Utf8Stream text;
  for (uint32_t i = 0; i < o.n_generate; ++i) {
    r.generated_ids.push_back(next);
    r.text += text.Push(model->TokenText(next));
    ++r.generated_tokens;
    if (i + 1 == o.n_generate) break;
    RETURN_IF_ERROR(session->Eval(std::span(&next, 1), false));
    next = sampler->Sample(session->Logits(-1));
  }
  r.text += text.Finish();
  r.generate_s = SecondsSince(t_generate);

  // From the first chunk not restored: new chunks, and any that were found but missing or damaged
  // (rewritten whole, so the next request finds them intact); then the tail. Of a memory that is
  // one KV cache, every token the session holds (the prompt and what was generated but the last
  // token), so a later prompt that continues this one (a conversation's next turn) prefills only
  // what is new.
  std::vector<int32_t> held = tokens;
  if (!r.generated_ids.empty()) held.insert(held.end(), r.generated_ids.begin(), r.generated_ids.end() - 1);
  if (o.store_new_chunks && store != nullptr) {
    const auto t_store = SteadyClock::now();
    // Encoding is after the response, never on the TTFT path.
    const CodecContext store_context{&calibrations, &model->fingerprint(), &pool};
    Result<StoredChunks> stored = StoredChunks{};
    auto one_cache = session->MemoryIsOneKvCache();
    if (!one_cache.ok()) {
      stored = one_cache.status();
    } else if (*one_cache) {
      stored = StoreSessionChunks(*store, *session, held, tokens.size() - 1, r.chunks_fetched, o.chunk_tokens,
                                  setup.plan.rungs, model->fingerprint(), store_context);
    } else if (r.chunks_fetched < keys.size()) {
      // Lossless state chunks: these layouts have no codec rungs yet.
      r.stored_levels = {std::string(kStateChunkCodec) + "/tokens"};
      if (snapshots) r.stored_levels.push_back(std::string(kStateChunkCodec) + "/boundary");
      if (!snapshots) {
        stored = StoreSessionStateChunks(*store, *session, keys, r.chunks_fetched, o.chunk_tokens);
      }
      for (uint32_t i = 0; i < taken.size() && stored.ok(); ++i) {
        const uint32_t c = r.chunks_fetched + i;
        auto one = StoreStateChunk(*store, keys[c], c, o.chunk_tokens, taken[i]);
        if (!one.ok()) {
          stored = one.status();
          break;
        }
        stored->chunks += one->chunks;
        stored->bytes += one->bytes;
      }
    }
    if (stored.ok()) {
      r.chunks_stored = stored->chunks;
      r.tail_tokens_stored = stored->tail_tokens;
      r.bytes_stored = stored->bytes;
    } else {
      Warn(r, "storing the prompt's chunks failed, they are not kept: " + stored.status().ToString());
    }
    r.store_s = SecondsSince(t_store);
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) r.peak_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  return r;
}

KVC_REPORT_JSON(RunReport, text, generated_ids, store, codec, link_gbps, prompt_tokens, reused_tokens, prefilled_tokens,
                generated_tokens, chunks_reusable, chunks_found, chunks_fetched, tail_tokens, variants, fallback,
                damaged, bytes_fetched, ttft_s, lookup_s, fetch_s, decode_s, restore_s, prefill_s, load_s, generate_s,
                store_s, peak_rss_bytes, chunks_stored, tail_tokens_stored, bytes_stored, llama_state_bytes, warnings,
                quality_floor, stored_levels)

std::string RunReportJson(const RunReport& r) { return DumpReport(r); }

}  // namespace kvc
