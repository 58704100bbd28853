#include "engine/run_job.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "engine/llama_engine.h"
#include "engine/model_files.h"
#include "engine/prefix_cache.h"

namespace kvc {
namespace {

// Tokens prefilled to measure this machine's prefill speed, which prices "recompute" for the
// level planner.
constexpr uint32_t kProbeTokens = 64;

}  // namespace

Result<RunReport> RunJob(const RunOptions& o) {
  RunReport r;
  r.codec = o.codec;
  r.link_gbps = o.link_gbps;
  const Codec* codec = FindCodec(o.codec);
  if (codec == nullptr) return InvalidArgument("unknown codec '" + o.codec + "'");
  const std::vector<std::string> levels = o.levels.empty() ? StoredLevels(o.codec) : o.levels;
  if (levels.empty()) return InvalidArgument("no levels to store for codec '" + o.codec + "'");
  if (o.chunk_tokens == 0) return InvalidArgument("chunk tokens must be positive");

  const auto t_load = SteadyClock::now();
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(o.model_path));
  CalibrationRegistry calibrations;
  RETURN_IF_ERROR(LoadModelCalibration(calibrations, o.model_path, o.calibration));
  if (codec->info().needs_calibration && calibrations.FindForModel(model->fingerprint()) == nullptr) {
    return InvalidArgument("codec '" + o.codec + "' needs a calibration: run `kvcodec calibrate --model " + o.model_path +
                           "` or pass --calibration");
  }
  r.store_url = o.store_url.empty() ? DefaultStoreUrl() : o.store_url;
  ASSIGN_OR_RETURN(auto store, OpenStore(r.store_url));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, model->Tokenize(o.prompt, true));
  if (tokens.size() < 2) return InvalidArgument("the prompt is empty");
  r.prompt_tokens = static_cast<uint32_t>(tokens.size());
  SessionOptions so;
  so.n_ctx = r.prompt_tokens + o.n_generate + 8;
  so.n_threads = o.threads;
  ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));
  const std::span<const int32_t> probe = std::span(tokens).first(std::min<size_t>(kProbeTokens, tokens.size()));
  ASSIGN_OR_RETURN(const double recompute_s, MeasureChunkPrefillSeconds(*session, probe, o.chunk_tokens));
  r.load_s = SecondsSince(t_load);

  const std::vector<ChunkKey> keys = ReusableChunkKeys(model->fingerprint(), tokens, o.chunk_tokens);
  r.chunks_reusable = static_cast<uint32_t>(keys.size());

  const auto t_request = SteadyClock::now();
  const CodecContext codec_context{&calibrations, &model->fingerprint(), nullptr};
  if (o.reuse) {
    LinkShaper link(LinkShaper::GbpsToBytesPerSecond(o.link_gbps));
    ASSIGN_OR_RETURN(const PrefixRestore p,
                     RestoreStoredPrefix(*store, *session, model->fingerprint(), keys, o.chunk_tokens, codec_context,
                                         link, ReuseFetchOptions(o.link_gbps, recompute_s, model->info())));
    r.chunks_found = p.chunks_found;
    r.chunks_fetched = p.chunks_fetched;
    r.fallback = p.fallback;
    r.variants = p.variants;
    r.bytes_fetched = p.bytes;
    r.lookup_s = p.lookup_s;
    r.fetch_s = p.fetch_s;
    r.decode_s = p.decode_s;
    r.restore_s = p.restore_s;
  }
  r.reused_tokens = r.chunks_fetched * o.chunk_tokens;

  const auto t_prefill = SteadyClock::now();
  const std::span<const int32_t> rest = std::span(tokens).subspan(r.reused_tokens);
  r.prefilled_tokens = static_cast<uint32_t>(rest.size());
  RETURN_IF_ERROR(session->Eval(rest, false));
  int32_t next = GreedyToken(session->Logits(-1));
  r.prefill_s = SecondsSince(t_prefill);
  r.ttft_s = SecondsSince(t_request);

  const auto t_generate = SteadyClock::now();
  for (uint32_t i = 0; i < o.n_generate; ++i) {
    r.text += model->TokenText(next);
    ++r.generated_tokens;
    if (i + 1 == o.n_generate) break;
    RETURN_IF_ERROR(session->Eval(std::span(&next, 1), false));
    next = GreedyToken(session->Logits(-1));
  }
  r.generate_s = SecondsSince(t_generate);

  // From the first chunk not restored: new chunks, and any that were found but missing or damaged
  // (rewritten whole, so the next request finds them intact).
  if (o.store_new_chunks && r.chunks_fetched < keys.size()) {
    const auto t_store = SteadyClock::now();
    ASSIGN_OR_RETURN(KvCache kv, session->ExtractKv());
    // The pool's threads start only now: encoding is after the response, never on the TTFT path.
    ThreadPool pool(0);
    const CodecContext store_context{&calibrations, &model->fingerprint(), &pool};
    ASSIGN_OR_RETURN(const StoredChunks stored, StoreChunks(*store, kv, keys, r.chunks_fetched, o.chunk_tokens, *codec,
                                                            levels, model->fingerprint(), store_context));
    r.chunks_stored = stored.chunks;
    r.bytes_stored = stored.bytes;
    r.store_s = SecondsSince(t_store);
  }
  return r;
}

std::string RunReportJson(const RunReport& r) {
  nlohmann::ordered_json j;
  j["text"] = r.text;
  j["store"] = r.store_url;
  j["codec"] = r.codec;
  j["link_gbps"] = r.link_gbps;
  j["prompt_tokens"] = r.prompt_tokens;
  j["reused_tokens"] = r.reused_tokens;
  j["prefilled_tokens"] = r.prefilled_tokens;
  j["generated_tokens"] = r.generated_tokens;
  j["chunks_reusable"] = r.chunks_reusable;
  j["chunks_found"] = r.chunks_found;
  j["chunks_fetched"] = r.chunks_fetched;
  j["variants"] = r.variants;
  j["fallback"] = r.fallback;
  j["bytes_fetched"] = r.bytes_fetched;
  j["ttft_s"] = r.ttft_s;
  j["lookup_s"] = r.lookup_s;
  j["fetch_s"] = r.fetch_s;
  j["decode_s"] = r.decode_s;
  j["restore_s"] = r.restore_s;
  j["prefill_s"] = r.prefill_s;
  j["load_s"] = r.load_s;
  j["generate_s"] = r.generate_s;
  j["store_s"] = r.store_s;
  j["chunks_stored"] = r.chunks_stored;
  j["bytes_stored"] = r.bytes_stored;
  return j.dump(2);
}

}  // namespace kvc
