#include "bench/ttft_bench.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "llama/llama_session.h"
#include "llama/model_files.h"
#include "reuse/prefix_reuse.h"
#include "reuse/reuse_setup.h"
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

namespace {

// A memory figure of this process from /proc/self/status ("VmHWM:", the peak since the last
// ResetPeakRss, or "VmRSS:"), in bytes; 0 where unreadable.
uint64_t ProcStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::strtoull(line.c_str() + field.size(), nullptr, 10) * 1024;
  }
  return 0;
}
// Linux resets the peak to the current RSS on "5" to clear_refs; false where it cannot.
bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

// The first `n` tokens of `text`'s tokens, the tokens repeated (after the first `n_bos`, the
// BOS where the model has one) when the text is shorter.
std::vector<int32_t> PromptTokens(const std::vector<int32_t>& text_tokens, size_t n_bos, size_t n) {
  std::vector<int32_t> out(text_tokens.begin(), text_tokens.begin() + std::min(n, text_tokens.size()));
  for (size_t i = out.size(); i < n; ++i) {
    out.push_back(text_tokens[n_bos + (i - n_bos) % (text_tokens.size() - n_bos)]);
  }
  return out;
}

}  // namespace

Result<std::string> RunTtftBenchJson(const TtftBenchOptions& o) {
  if (o.chunk_tokens == 0 || o.prompt_tokens <= o.chunk_tokens)
    return InvalidArgument("need prompt > chunk > 0 tokens");
  std::vector<uint32_t> prefixes = o.prefix_tokens;
  if (prefixes.empty()) prefixes.push_back((o.prompt_tokens - 1) / o.chunk_tokens * o.chunk_tokens);
  for (uint32_t p : prefixes) {
    if (p == 0 || p % o.chunk_tokens != 0 || p > kMaxTokens - o.chunk_tokens) {
      return InvalidArgument(
          FormatMessage("prefix length %u is not a whole number of %u-token chunks", p, o.chunk_tokens));
    }
  }
  for (const std::string& name : o.codecs) RETURN_IF_ERROR(CheckCodecName(name));
  for (const double gbps : o.link_gbps) {
    RETURN_IF_ERROR(CheckLinkGbps(gbps));
    if (gbps == 0) return InvalidArgument("a link rate to emulate must be positive");
  }
  // The codecs measured are stored at every level the floor allows: the floor alone, no plan.
  ReuseSetupOptions setup_options = ReuseSetupOptionsOf(o);
  setup_options.codec.clear();
  ASSIGN_OR_RETURN(const ReuseSetup setup, SetUpReuse(setup_options));
  const std::unique_ptr<LlamaModel>& model = setup.model;
  CalibrationRegistry& calibrations = *setup.calibrations;
  const QualityFloor& floor = setup.plan.floor;
  const ModelFingerprint& fp = model->fingerprint();
  std::vector<const Codec*> codecs;
  for (const Codec* c : AllCodecs()) {
    const std::string& name = c->info().name;
    const bool named = std::find(o.codecs.begin(), o.codecs.end(), name) != o.codecs.end();
    if (!o.codecs.empty() && !named) continue;
    if (c->info().needs_calibration && calibrations.FindForModel(fp) == nullptr) {
      // Every codec: those that can run here. One asked for by name: said, as `run` says it.
      if (named) return NeedsCalibration(name, o.model_path);
      continue;
    }
    if (floor.Levels(name).empty()) continue;  // every rung over the model's quality floor
    codecs.push_back(c);
  }
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(BesideModel(o.model_path, "eval.txt", o.text_path)));
  ASSIGN_OR_RETURN(const std::vector<int32_t> text_tokens, model->Tokenize(text, true));
  const size_t n_bos = model->has_bos() && !text_tokens.empty() && text_tokens[0] == model->bos_token() ? 1 : 0;
  if (text_tokens.size() <= n_bos) return InvalidArgument("the text has no tokens");
  const CodecContext context{&calibrations, &fp, nullptr};
  // Fetch and decode on one pool, as run and serve do; llama.cpp keeps its own threads.
  ThreadPool pool(FetchPoolThreads(o.fetch_threads));
  const bool rss_resets = ResetPeakRss();

  ProgressBar progress("bench ttft", prefixes.size() * codecs.size() * (1 + o.link_gbps.size()), o.progress);
  Json variants_json = Json::array();
  Json rows = Json::array();
  Json prefix_json = Json::array();
  for (size_t pi = 0; pi < prefixes.size(); ++pi) {
    const uint32_t prefix_tokens = prefixes[pi];
    const std::vector<int32_t> tokens = PromptTokens(text_tokens, n_bos, size_t{prefix_tokens} + o.chunk_tokens);
    SessionOptions so;
    so.n_ctx = static_cast<uint32_t>(tokens.size()) + 8;
    so.n_threads = o.threads;
    so.require_kv = true;
    ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));
    // Recompute: the whole prompt prefilled, first token's logits ready (long prompts once).
    std::vector<double> recompute;
    const uint32_t recompute_runs = prefix_tokens <= 8192 ? std::max(1u, o.repeats) : 1;
    for (uint32_t i = 0; i < recompute_runs; ++i) {
      session->Clear();
      const auto t = SteadyClock::now();
      RETURN_IF_ERROR(session->Eval(tokens, false));
      recompute.push_back(SecondsSince(t));
    }
    ASSIGN_OR_RETURN(KvCache kv, session->ExtractKv());
    const std::vector<ChunkKey> keys = ReusableChunkKeys(fp, tokens, o.chunk_tokens);
    const uint32_t reused = static_cast<uint32_t>(keys.size()) * o.chunk_tokens;
    const uint64_t fp16_bytes = uint64_t{reused} * kv.shape().row_elems() * kv.shape().n_layers * 2 * 2;
    Json pj;
    pj["prefix_tokens"] = reused;
    pj["prompt_tokens"] = tokens.size();
    pj["kv_fp16_bytes"] = fp16_bytes;
    pj["recompute_ttft_s"] = Median(recompute);
    pj["text_repeated"] = text_tokens.size() < tokens.size();
    prefix_json.push_back(std::move(pj));

    for (const Codec* codec : codecs) {
      const std::string& name = codec->info().name;
      const std::vector<std::string> levels = floor.Levels(name);
      auto store = MakeMemoryStore({.capacity_bytes = uint64_t{64} << 30});
      RETURN_IF_ERROR(StoreChunks(*store, kv.View(), keys, 0, o.chunk_tokens, *codec, levels, fp, context).status());
      // Each stored variant's ratio and one-thread decode speed over all chunks (the projection's
      // inputs), at the first prefix length.
      for (const std::string& level : pi == 0 ? levels : std::vector<std::string>{}) {
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
        std::vector<double> ttft, lookup, fetch, decode, restore, prefill, bound, pipeline_bound, max_decode,
            peak_growth;
        uint64_t bytes = 0, peak_rss = 0;
        std::vector<std::string> chosen;
        for (uint32_t rep = 0; rep < std::max(1u, o.repeats); ++rep) {
          session->Clear();
          LinkShaper link(LinkShaper::GbpsToBytesPerSecond(gbps));
          FetchOptions fo;
          for (const std::string& level : levels) fo.allowed.emplace_back(name, level);
          fo.initial_gbps = gbps;
          fo.kv_shape = kv.shape();
          fo.pool = &pool;
          // Freed heap memory goes back to the system first, so what the run allocates shows as
          // growth rather than hiding in pages an earlier step left resident.
          malloc_trim(0);
          ResetPeakRss();
          const uint64_t rss_before = ProcStatusBytes("VmRSS:");
          const auto t0 = SteadyClock::now();
          ASSIGN_OR_RETURN(const PrefixRestore p,
                           RestoreStoredPrefix(*store, *session, fp, keys, {}, o.chunk_tokens, context, link, fo));
          if (p.chunks_fetched != keys.size()) return Internal(name + ": reuse stopped early: " + p.fallback);
          const auto t_prefill = SteadyClock::now();
          RETURN_IF_ERROR(session->Eval(std::span(tokens).subspan(reused), false));
          const double prefill_s = SecondsSince(t_prefill);
          ttft.push_back(SecondsSince(t0));
          const uint64_t peak = ProcStatusBytes("VmHWM:");
          peak_rss = std::max(peak_rss, peak);
          peak_growth.push_back(static_cast<double>(peak > rss_before ? peak - rss_before : 0));
          lookup.push_back(p.lookup_s);
          fetch.push_back(p.fetch_s);
          decode.push_back(p.decode_s);
          restore.push_back(p.restore_s);
          prefill.push_back(prefill_s);
          max_decode.push_back(p.max_chunk_decode_s);
          const double link_s = static_cast<double>(p.bytes) / LinkShaper::GbpsToBytesPerSecond(gbps);
          bound.push_back(link_s + p.max_chunk_decode_s + prefill_s);
          // What this machine's cores allow as well: all chunks' decode spread over the pool.
          pipeline_bound.push_back(
              std::max(link_s, p.decode_s / static_cast<double>(std::max<size_t>(1, pool.size()))) +
              p.max_chunk_decode_s + prefill_s);
          bytes = p.bytes;
          chosen = p.variants;
        }
        Json r;
        r["prefix_tokens"] = reused;
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
        r["pipeline_bound_s"] = Median(pipeline_bound);
        r["ttft_over_pipeline_bound"] = Median(ttft) / Median(pipeline_bound);
        r["ttft_per_prefix_token_us"] = Median(ttft) / reused * 1e6;
        // The part of TTFT that grows with the prefix: everything but the suffix's prefill.
        r["reuse_per_prefix_token_us"] = (Median(ttft) - Median(prefill)) / reused * 1e6;
        r["peak_rss_bytes"] = peak_rss;
        r["peak_rss_growth_bytes"] = Median(peak_growth);
        r["peak_rss_growth_per_prefix_token"] = Median(peak_growth) / reused;
        r["variants"] = chosen;
        rows.push_back(std::move(r));
        progress.Advance();
      }
    }
  }
  progress.Finish();
  const Json& first = prefix_json[0];
  // Restoring into llama.cpp per byte of fp16 KV, measured on every run here (the median): the
  // projection adds the last chunk's restore, the one no transfer hides.
  std::vector<double> restore_s_per_byte;
  for (const auto& row : rows) {
    const double kv = row["prefix_tokens"].get<double>() *
                      (first["kv_fp16_bytes"].get<double>() / first["prefix_tokens"].get<double>());
    restore_s_per_byte.push_back(row["restore_s"].get<double>() / kv);
  }
  const double restore_per_byte = Median(restore_s_per_byte);

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
        const double last_restore = kv_bytes / chunks * restore_per_byte;
        const double t = std::max(stored / rate, decode_all) + one_chunk + last_restore + suffix_s;
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
  j["chunk_tokens"] = o.chunk_tokens;
  j["fetch_threads"] = pool.size();
  j["peak_rss_resets"] = rss_resets;
  // The first prefix length's figures, as before there were several.
  j["prompt_tokens"] = first["prompt_tokens"];
  j["reused_tokens"] = first["prefix_tokens"];
  j["kv_fp16_bytes"] = first["kv_fp16_bytes"];
  j["recompute_ttft_s"] = first["recompute_ttft_s"];
  j["prefixes"] = std::move(prefix_json);
  j["rows"] = std::move(rows);
  j["variants"] = std::move(variants_json);
  Json pj;
  pj["label"] = "PROJECTION, not a measurement";
  pj["assumptions"] = FormatMessage(
      "prefix %u tokens + suffix %u; GPU prefill at %.0f TFLOP/s sustained (2 x params FLOPs per token); %u CPU "
      "cores decoding at this machine's measured one-core speed; compression ratios measured on this model; "
      "TTFT = max(stored bytes / link, decode of all chunks) + one chunk's decode + one chunk's restore (at the "
      "%.2f GB/s of fp16 KV measured here) + suffix prefill",
      kProjectedPrefixTokens, kProjectedSuffixTokens, kAssumedPrefillFlops / 1e12, kAssumedDecoders,
      restore_per_byte > 0 ? 1e-9 / restore_per_byte : 0.0);
  pj["restore_gb_s"] = restore_per_byte > 0 ? 1e-9 / restore_per_byte : 0.0;
  pj["points"] = std::move(projection);
  j["projection"] = std::move(pj);
  return j.dump(2);
}

}  // namespace kvc
