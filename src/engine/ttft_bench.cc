#include "engine/ttft_bench.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/progress.h"
#include "engine/llama_engine.h"
#include "engine/model_files.h"
#include "engine/prefix_cache.h"
#include "store/chunk_manifest.h"
#include "store/memory_store.h"

namespace kvc {
namespace {

using Json = nlohmann::ordered_json;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Model shapes of the projection (published Llama-family configurations).
struct ProjectedModel {
  const char* name;
  uint32_t n_layers, n_kv_heads, head_dim;
  double params;
};
constexpr ProjectedModel kProjectedModels[] = {
    {"7B", 32, 32, 128, 6.7e9},
    {"34B", 48, 8, 128, 34e9},
    {"70B", 80, 8, 128, 70e9},
};
constexpr double kProjectedLinkGbps[] = {1, 2, 5, 10, 20, 40};
// Assumptions of the projection, reported with it: a GPU that sustains this many FLOP/s in
// prefill (2 x parameters FLOPs per token), this many CPU cores decoding chunks at this
// machine's measured per-core speed, and these prompt lengths.
constexpr double kAssumedPrefillFlops = 400e12;
constexpr uint32_t kAssumedDecoders = 16;
constexpr uint32_t kProjectedPrefixTokens = 8192;
constexpr uint32_t kProjectedSuffixTokens = 256;

}  // namespace

Result<std::string> RunTtftBenchJson(const TtftBenchOptions& o) {
  if (o.chunk_tokens == 0 || o.prompt_tokens <= o.chunk_tokens) return InvalidArgument("need prompt > chunk > 0 tokens");
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(o.model_path));
  CalibrationRegistry calibrations;
  RETURN_IF_ERROR(LoadModelCalibration(calibrations, o.model_path, o.calibration));
  const ModelFingerprint& fp = model->fingerprint();
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(BesideModel(o.model_path, "eval.txt", o.text_path)));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, model->Tokenize(text, true));
  if (tokens.size() < o.prompt_tokens) return InvalidArgument("text too short for --prompt-tokens");
  tokens.resize(o.prompt_tokens);
  SessionOptions so;
  so.n_ctx = o.prompt_tokens + 8;
  so.n_threads = o.threads;
  ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));

  // Recompute: the whole prompt prefilled, first token's logits ready.
  std::vector<double> recompute;
  for (uint32_t i = 0; i < std::max(1u, o.repeats); ++i) {
    session->Clear();
    const auto t = SteadyClock::now();
    RETURN_IF_ERROR(session->Eval(tokens, false));
    recompute.push_back(SecondsSince(t));
  }
  ASSIGN_OR_RETURN(KvCache kv, session->ExtractKv());
  const std::vector<ChunkKey> keys = ReusableChunkKeys(fp, tokens, o.chunk_tokens);
  const uint32_t reused = static_cast<uint32_t>(keys.size()) * o.chunk_tokens;
  const uint64_t fp16_bytes = uint64_t{reused} * kv.shape().row_elems() * kv.shape().n_layers * 2 * 2;

  ASSIGN_OR_RETURN(const QualityFloor floor, LoadQualityFloor(o.model_path, o.profile, fp, calibrations, o.quality));
  std::vector<const Codec*> codecs;
  for (const Codec* c : AllCodecs()) {
    const std::string& name = c->info().name;
    if (!o.codecs.empty() && std::find(o.codecs.begin(), o.codecs.end(), name) == o.codecs.end()) continue;
    if (c->info().needs_calibration && calibrations.FindForModel(fp) == nullptr) continue;
    if (floor.Levels(name).empty()) continue;  // every rung over the model's quality floor
    codecs.push_back(c);
  }
  const CodecContext context{&calibrations, &fp, nullptr};

  ProgressBar progress("bench ttft", codecs.size() * (1 + o.link_gbps.size()), o.progress);
  Json variants_json = Json::array();
  Json rows = Json::array();
  for (const Codec* codec : codecs) {
    const std::string& name = codec->info().name;
    const std::vector<std::string> levels = floor.Levels(name);
    auto store = MakeMemoryStore({.capacity_bytes = uint64_t{64} << 30});
    RETURN_IF_ERROR(StoreChunks(*store, kv, keys, 0, o.chunk_tokens, *codec, levels, fp, context).status());
    // Each stored variant's ratio and one-thread decode speed over all chunks: the projection's inputs.
    for (const std::string& level : levels) {
      uint64_t stored = 0;
      const auto t = SteadyClock::now();
      for (const ChunkKey& k : keys) {
        ASSIGN_OR_RETURN(auto bytes, store->Get(ChunkObjectName(k, name, level)));
        stored += bytes.size();
        RETURN_IF_ERROR(DecodeKvc(bytes, &fp, context).status());
      }
      const double decode_s = SecondsSince(t);
      Json v;
      v["codec"] = name;
      v["level"] = level;
      v["compression_ratio"] = static_cast<double>(fp16_bytes) / static_cast<double>(stored);
      v["decode_mb_s_1t"] = static_cast<double>(fp16_bytes) / 1e6 / decode_s;
      variants_json.push_back(std::move(v));
    }
    progress.Advance();

    for (double gbps : o.link_gbps) {
      std::vector<double> ttft, lookup, fetch, decode, restore, prefill, bound, max_decode;
      uint64_t bytes = 0;
      std::vector<std::string> chosen;
      for (uint32_t rep = 0; rep < std::max(1u, o.repeats); ++rep) {
        session->Clear();
        LinkShaper link(LinkShaper::GbpsToBytesPerSecond(gbps));
        FetchOptions fo;
        for (const std::string& level : levels) fo.allowed.emplace_back(name, level);
        fo.initial_gbps = gbps;
        fo.kv_shape = kv.shape();
        const auto t0 = SteadyClock::now();
        ASSIGN_OR_RETURN(const PrefixRestore p, RestoreStoredPrefix(*store, *session, fp, keys, o.chunk_tokens,
                                                                    context, link, fo));
        if (p.chunks_fetched != keys.size()) return Internal(name + ": reuse stopped early: " + p.fallback);
        const auto t_prefill = SteadyClock::now();
        RETURN_IF_ERROR(session->Eval(std::span(tokens).subspan(reused), false));
        const double prefill_s = SecondsSince(t_prefill);
        ttft.push_back(SecondsSince(t0));
        lookup.push_back(p.lookup_s);
        fetch.push_back(p.fetch_s);
        decode.push_back(p.decode_s);
        restore.push_back(p.restore_s);
        prefill.push_back(prefill_s);
        max_decode.push_back(p.max_chunk_decode_s);
        bound.push_back(static_cast<double>(p.bytes) / LinkShaper::GbpsToBytesPerSecond(gbps) + p.max_chunk_decode_s +
                        prefill_s);
        bytes = p.bytes;
        chosen = p.variants;
      }
      Json r;
      r["codec"] = name;
      r["link_gbps"] = gbps;
      r["ttft_s"] = Median(ttft);
      r["lookup_s"] = Median(lookup);
      r["fetch_s"] = Median(fetch);
      r["decode_s"] = Median(decode);
      r["restore_s"] = Median(restore);
      r["prefill_s"] = Median(prefill);
      r["max_chunk_decode_s"] = Median(max_decode);
      r["bytes_fetched"] = bytes;
      r["bound_s"] = Median(bound);
      r["ttft_over_bound"] = Median(ttft) / Median(bound);
      r["variants"] = chosen;
      rows.push_back(std::move(r));
      progress.Advance();
    }
  }
  progress.Finish();

  // Projection: for every model shape, link rate and codec, the best stored variant's TTFT from
  // the measured ratio and per-core decode speed, under the stated assumptions.
  Json projection = Json::array();
  for (const ProjectedModel& m : kProjectedModels) {
    const double kv_bytes = double{kProjectedPrefixTokens} * 2 * m.n_layers * m.n_kv_heads * m.head_dim * 2;
    const double prefill_tps = kAssumedPrefillFlops / (2 * m.params);
    const double recompute_s = (kProjectedPrefixTokens + kProjectedSuffixTokens) / prefill_tps;
    const double suffix_s = kProjectedSuffixTokens / prefill_tps;
    const double chunks = double{kProjectedPrefixTokens} / o.chunk_tokens;
    for (double gbps : kProjectedLinkGbps) {
      const double rate = LinkShaper::GbpsToBytesPerSecond(gbps);
      std::map<std::string, std::pair<double, std::string>> best;  // codec -> (ttft, level)
      for (const auto& v : variants_json) {
        const std::string codec = v["codec"];
        const double stored = kv_bytes / v["compression_ratio"].get<double>();
        const double decode_rate = v["decode_mb_s_1t"].get<double>() * 1e6;
        const double decode_all = kv_bytes / (decode_rate * kAssumedDecoders);
        const double one_chunk = kv_bytes / chunks / decode_rate;
        const double t = std::max(stored / rate, decode_all) + one_chunk + suffix_s;
        auto it = best.find(codec);
        if (it == best.end() || t < it->second.first) best[codec] = {t, v["level"].get<std::string>()};
      }
      for (const auto& [codec, tl] : best) {
        Json p;
        p["model"] = m.name;
        p["link_gbps"] = gbps;
        p["codec"] = codec;
        p["level"] = tl.second;
        p["ttft_s"] = tl.first;
        p["recompute_s"] = recompute_s;
        projection.push_back(std::move(p));
      }
    }
  }

  Json j;
  j["model"] = model->path();
  j["quality_floor"] = floor.note;
  j["prompt_tokens"] = o.prompt_tokens;
  j["chunk_tokens"] = o.chunk_tokens;
  j["reused_tokens"] = reused;
  j["kv_fp16_bytes"] = fp16_bytes;
  j["recompute_ttft_s"] = Median(recompute);
  j["rows"] = std::move(rows);
  j["variants"] = std::move(variants_json);
  Json pj;
  pj["label"] = "PROJECTION, not a measurement";
  pj["assumptions"] = FormatMessage(
      "prefix %u tokens + suffix %u; GPU prefill at %.0f TFLOP/s sustained (2 x params FLOPs per token); %u CPU "
      "cores decoding at this machine's measured one-core speed; compression ratios measured on this model; "
      "TTFT = max(stored bytes / link, decode of all chunks) + one chunk's decode + suffix prefill",
      kProjectedPrefixTokens, kProjectedSuffixTokens, kAssumedPrefillFlops / 1e12, kAssumedDecoders);
  pj["points"] = std::move(projection);
  j["projection"] = std::move(pj);
  return j.dump(2);
}

}  // namespace kvc
