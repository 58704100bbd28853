// kvcodec: compress, inspect and evaluate LLM KV caches from the command line.
// Uses only the public API and the tools' entry points (kvcodec_tools.h); every error is one
// line on stderr and a non-zero exit.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_files.h"
#include "kvcodec/kvcodec.hpp"
#include "kvcodec_tools.h"

namespace {

// One line on stderr, whatever the message quotes: a path or a name with a newline or an escape
// sequence in it can neither forge another line nor reach the terminal as a control sequence.
// (The library's own messages are already escaped this way.)
int Fail(const std::string& message) {
  std::string line;
  for (unsigned char c : message) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      line += buf;
    } else {
      line += static_cast<char>(c);
    }
  }
  std::fprintf(stderr, "kvcodec: error: %s\n", line.c_str());
  return 1;
}

int Fail(const kvcodec::Error& error) { return Fail(error.message); }

std::string DefaultModel() {
  const char* env = std::getenv("KVCODEC_MODEL");
  return env != nullptr ? env : KVCODEC_DEFAULT_MODEL;
}

// Input limits: a .kvc or KV dump holds at most a 16 GiB cache (the library's own limit) plus its
// headers; texts and prompts are far smaller than a gigabyte.
constexpr uint64_t kMaxKvFileBytes = (uint64_t{16} << 30) + (uint64_t{64} << 20);
constexpr uint64_t kMaxTextFileBytes = uint64_t{1} << 30;

constexpr const char* kStoreSecretHelp =
    "Seal and check every stored object with HMAC-SHA256 keyed with this secret, so that only writers "
    "holding it can supply chunks (for shared stores); prefer $KVCODEC_STORE_SECRET, which `ps` does not show";

std::string JoinParams(const std::vector<std::string>& params) {
  std::string joined;
  for (const auto& p : params) joined += (joined.empty() ? "" : ",") + p;
  return joined;
}

kvc_dtype ParseCacheType(const std::string& s) {
  if (s == "f32") return KVC_F32;
  if (s == "bf16") return KVC_BF16;
  return KVC_F16;
}

struct EvalArgs {
  std::string model = DefaultModel(), text, token_file, codec = "raw", level, cache_type = "f16", calibration;
  std::vector<std::string> params;
  uint32_t docs = 8, ctx = 1024, cont = 128;
  int threads = 0;
  bool json = false, quiet = false;
};

int RunEval(const EvalArgs& a) {
  kvc_eval_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.token_path = a.token_file.empty() ? nullptr : a.token_file.c_str();
  p.codec = a.codec.c_str();
  p.level = a.level.empty() ? nullptr : a.level.c_str();
  const std::string params = JoinParams(a.params);
  p.codec_params = params.empty() ? nullptr : params.c_str();
  p.n_docs = a.docs;
  p.ctx = a.ctx;
  p.cont = a.cont;
  p.n_threads = a.threads;
  p.cache_type = ParseCacheType(a.cache_type);
  p.progress = a.quiet ? 0 : 1;
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  auto report = kvcodec::EvalJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("codec %s level %s: %u docs, ctx %u, cont %u\n", j["codec"].get<std::string>().c_str(),
              j["level"].get<std::string>().c_str(), a.docs, a.ctx, a.cont);
  std::printf("  compression ratio  %.2fx  (%llu fp16 bytes -> %llu stored)\n", j["compression_ratio"].get<double>(),
              j["bytes_fp16"].get<unsigned long long>(), j["bytes_stored"].get<unsigned long long>());
  std::printf("  perplexity         %.4f -> %.4f  (%+.3f%%)\n", j["ppl_base"].get<double>(),
              j["ppl_codec"].get<double>(), j["ppl_delta_pct"].get<double>());
  std::printf("  top-1 agreement    %.4f\n", j["top1_agreement"].get<double>());
  std::printf("  mean KL            %.6f\n", j["kl_mean"].get<double>());
  std::printf("  encode / decode    %.1f / %.1f MB/s\n", j["encode_mb_s"].get<double>(),
              j["decode_mb_s"].get<double>());
  return 0;
}

struct CodecsArgs {
  std::string model, profile, calibration;
  double max_ppl_delta = 1.0, min_top1 = 0.97;
  bool json = false;
};

// The model's quality profile and the floor it gives: what run, serve and bench ttft may use.
int RunModelFloor(const CodecsArgs& a) {
  auto floor = kvcodec::QualityFloorJson(a.model, a.profile, a.calibration, a.max_ppl_delta, a.min_top1);
  if (!floor.ok()) return Fail(floor.error());
  if (a.json) {
    std::cout << floor.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(floor.value());
  std::printf("%s: %s\n", a.model.c_str(), j["note"].get<std::string>().c_str());
  std::set<std::string> allowed;
  for (const auto& r : j["allowed"]) allowed.insert(r.get<std::string>());
  if (!j["profile"].is_null()) {
    const auto& p = j["profile"];
    std::printf("profile: %u documents of %u + %u tokens from %s\n", p["docs"].get<unsigned>(),
                p["ctx"].get<unsigned>(), p["cont"].get<unsigned>(), p["text"].get<std::string>().c_str());
    std::printf("  %-9s %-7s %8s %10s %8s %10s  %s\n", "codec", "level", "ratio", "ppl delta", "top-1", "KL", "");
    for (const auto& r : p["rungs"]) {
      const std::string name = r["codec"].get<std::string>() + "/" + r["level"].get<std::string>();
      std::printf("  %-9s %-7s %8.2f %+9.3f%% %8.4f %10.6f  %s\n", r["codec"].get<std::string>().c_str(),
                  r["level"].get<std::string>().c_str(), r["ratio"].get<double>(), r["ppl_delta_pct"].get<double>(),
                  r["top1_agreement"].get<double>(), r["kl_mean"].get<double>(),
                  allowed.count(name) ? "allowed" : "over the floor");
    }
  } else {
    std::string list;
    for (const auto& r : allowed) list += (list.empty() ? "" : ", ") + r;
    std::printf("allowed: %s\n", list.c_str());
  }
  return 0;
}

int RunCodecs(const CodecsArgs& a) {
  if (!a.model.empty()) return RunModelFloor(a);
  const bool json = a.json;
  auto codecs = kvcodec::CodecsJson();
  if (!codecs.ok()) return Fail(codecs.error());
  if (json) {
    std::cout << codecs.value() << "\n";
    return 0;
  }
  for (const auto& c : nlohmann::json::parse(codecs.value())) {
    std::string levels;
    for (const auto& l : c["levels"]) levels += (levels.empty() ? "" : ", ") + l.get<std::string>();
    std::string params;
    for (const auto& p : c["params"]) params += (params.empty() ? "" : ", ") + p.get<std::string>();
    std::printf("%-10s levels: %s (default %s)%s%s\n           %s\n", c["name"].get<std::string>().c_str(),
                levels.c_str(), c["default_level"].get<std::string>().c_str(),
                params.empty() ? "" : "; params: ", params.c_str(), c["description"].get<std::string>().c_str());
  }
  return 0;
}

struct EncodeArgs {
  std::string model = DefaultModel(), text, kv_dump, codec = "raw", level, out, cache_type = "f16", calibration;
  std::vector<std::string> params;
  uint32_t tokens = 0, kv_heads = 0, token_begin = 0, n_tokens = 0;
};

int RunEncode(const EncodeArgs& a) {
  if (!a.calibration.empty()) {
    if (auto err = kvcodec::LoadCalibration(a.calibration)) return Fail(*err);
  }
  kvcodec::Kv kv;
  std::vector<uint8_t> fingerprint(16, 0);
  if (!a.kv_dump.empty()) {
    std::vector<uint8_t> bytes;
    if (auto e = kvcodec_cli::ReadInputFile(a.kv_dump, kMaxKvFileBytes, &bytes); !e.empty()) return Fail(e);
    uint32_t heads = a.kv_heads;
    if (heads == 0 || !a.text.empty()) {
      auto model = kvcodec::Model::Load(a.model);
      if (!model.ok()) return Fail(model.error());
      fingerprint = model.value().Fingerprint();
      if (heads == 0) heads = nlohmann::json::parse(model.value().InfoJson().value())["n_kv_heads"].get<uint32_t>();
    }
    auto parsed = kvcodec::KvFromLlamaState(bytes, heads);
    if (!parsed.ok()) return Fail(parsed.error());
    kv = std::move(parsed.value());
  } else {
    if (a.text.empty()) return Fail("give --text FILE (with --model) or --kv DUMP");
    std::vector<uint8_t> text;
    if (auto e = kvcodec_cli::ReadInputFile(a.text, kMaxTextFileBytes, &text); !e.empty()) return Fail(e);
    auto model = kvcodec::Model::Load(a.model);
    if (!model.ok()) return Fail(model.error());
    fingerprint = model.value().Fingerprint();
    auto tokens = model.value().Tokenize(std::string(text.begin(), text.end()), true);
    if (!tokens.ok()) return Fail(tokens.error());
    std::vector<int32_t> ids = tokens.value();
    if (a.tokens > 0 && ids.size() > a.tokens) ids.resize(a.tokens);
    kvc_session_params sp;
    kvc_session_default_params(&sp);
    sp.n_ctx = static_cast<uint32_t>(ids.size()) + 8;
    sp.cache_type = ParseCacheType(a.cache_type);
    auto session = kvcodec::Session::Create(model.value(), sp);
    if (!session.ok()) return Fail(session.error());
    if (auto err = session.value().Eval(ids)) return Fail(*err);
    auto extracted = session.value().Extract();
    if (!extracted.ok()) return Fail(extracted.error());
    kv = std::move(extracted.value());
  }
  auto bytes = kvcodec::Encode(kv, a.codec, a.level, JoinParams(a.params), fingerprint, a.token_begin, a.n_tokens);
  if (!bytes.ok()) return Fail(bytes.error());
  if (auto e = kvcodec_cli::WriteOutputFile(a.out, bytes.value()); !e.empty()) return Fail(e);
  const kvc_shape s = kvcodec::Shape(kv);
  const uint32_t covered = a.n_tokens ? a.n_tokens : s.n_tokens - a.token_begin;
  const double fp16 = 4.0 * s.n_layers * s.n_kv_heads * s.head_dim * covered;
  std::printf("wrote %s: %u tokens, %zu bytes (%.2fx vs fp16)\n", a.out.c_str(), covered, bytes.value().size(),
              fp16 / static_cast<double>(bytes.value().size()));
  return 0;
}

int RunDecode(const std::string& in, const std::string& out, const std::string& model_path,
              const std::vector<std::string>& calibrations) {
  for (const auto& c : calibrations) {
    if (auto err = kvcodec::LoadCalibration(c)) return Fail(*err);
  }
  std::vector<uint8_t> bytes;
  if (auto e = kvcodec_cli::ReadInputFile(in, kMaxKvFileBytes, &bytes); !e.empty()) return Fail(e);
  std::vector<uint8_t> fingerprint;
  if (!model_path.empty()) {
    auto model = kvcodec::Model::Load(model_path);
    if (!model.ok()) return Fail(model.error());
    fingerprint = model.value().Fingerprint();
  }
  auto kv = kvcodec::Decode(bytes, fingerprint.empty() ? nullptr : &fingerprint);
  if (!kv.ok()) return Fail(in + ": " + kv.error().message);
  const kvc_shape s = kvcodec::Shape(kv.value());
  if (!out.empty()) {
    auto state = kvcodec::KvToLlamaState(kv.value());
    if (!state.ok()) return Fail(state.error());
    if (auto e = kvcodec_cli::WriteOutputFile(out, state.value()); !e.empty()) return Fail(e);
  }
  std::printf("decoded %s: %u layers x %u tokens x %u kv heads x %u dims%s%s\n", in.c_str(), s.n_layers, s.n_tokens,
              s.n_kv_heads, s.head_dim, out.empty() ? "" : " -> llama.cpp sequence state ", out.c_str());
  return 0;
}

struct ProfileArgs {
  std::string model = DefaultModel(), text, calibration, out;
  uint32_t docs = 0, ctx = 0, cont = 0;
  int threads = 0;
  bool json = false, quiet = false;
};

int RunProfile(const ProfileArgs& a) {
  kvc_profile_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.out_path = a.out.empty() ? nullptr : a.out.c_str();
  p.docs = a.docs;
  p.ctx = a.ctx;
  p.cont = a.cont;
  p.n_threads = a.threads;
  p.progress = a.quiet ? 0 : 1;
  auto report = kvcodec::ProfileJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("wrote %s: %zu rungs on %u documents of %u + %u tokens (see `kvcodec codecs --model %s`)\n",
              j["out"].get<std::string>().c_str(), j["rungs"].size(), j["docs"].get<unsigned>(),
              j["ctx"].get<unsigned>(), j["cont"].get<unsigned>(), a.model.c_str());
  return 0;
}

struct CalibrateArgs {
  std::string model = DefaultModel(), text, token_file, out, grouping = "auto", quantizer = "auto";
  uint32_t group_size = 0, tokens = 0, window = 0, chunk = 256;
  bool no_profile = false;
  int threads = 0;
  bool json = false, quiet = false;
};

int RunCalibrate(const CalibrateArgs& a) {
  kvc_calibrate_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.out_path = a.out.empty() ? nullptr : a.out.c_str();
  p.grouping = a.grouping.c_str();
  p.quantizer = a.quantizer.c_str();
  p.token_path = a.token_file.empty() ? nullptr : a.token_file.c_str();
  p.group_size = a.group_size;
  p.max_tokens = a.tokens;
  p.window = a.window;
  p.chunk_tokens = a.chunk;
  p.n_threads = a.threads;
  p.progress = a.quiet ? 0 : 1;
  auto report = kvcodec::CalibrateJson(p);
  if (!report.ok()) return Fail(report.error());
  if (!a.no_profile) {
    // The new calibration makes the old profile's kvtc rungs stale: measure them all again.
    ProfileArgs pa;
    pa.model = a.model;
    pa.calibration = nlohmann::json::parse(report.value())["out"].get<std::string>();
    pa.threads = a.threads;
    pa.quiet = a.quiet;
    pa.json = false;
    if (a.json) {
      kvc_profile_params pp{};
      pp.model_path = pa.model.c_str();
      pp.calibration = pa.calibration.c_str();
      pp.n_threads = pa.threads;
      pp.progress = a.quiet ? 0 : 1;
      auto profiled = kvcodec::ProfileJson(pp);
      if (!profiled.ok()) return Fail(profiled.error());
    } else if (int rc = RunProfile(pa); rc != 0) {
      return rc;
    }
  }
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf(
      "wrote %s: quantizer %s, grouping %s, group size %u; windows of %u tokens, fitted on %u tokens, "
      "measured on %u held back (chunks of %u)\n",
      j["out"].get<std::string>().c_str(), j["quantizer"].get<std::string>().c_str(),
      j["grouping"].get<std::string>().c_str(), j["group_size"].get<unsigned>(), j["window"].get<unsigned>(),
      j["fit_tokens"].get<unsigned>(), j["heldout_tokens"].get<unsigned>(), j["chunk_tokens"].get<unsigned>());
  std::printf("  chose %s\n", j["choice"].get<std::string>().c_str());
  std::printf("  variance in the top 8 components: keys %.1f%%, values %.1f%%\n",
              100 * j["key_variance_top8"].get<double>(), 100 * j["value_variance_top8"].get<double>());
  std::printf("  %8s %12s %12s %10s %14s %14s\n", "ratio", "alloc b/val", "coded b/val", "coded x", "rel. MSE",
              "RWF bits/val");
  for (const auto& r : j["rungs"]) {
    std::printf("  %8g %12.3f %12.3f %10.2f %14.5f %14.3f\n", r["target_ratio"].get<double>(),
                r["allocated_bits_per_value"].get<double>(), r["coded_bits_per_value"].get<double>(),
                r["coded_ratio"].get<double>(), r["heldout_rel_mse"].get<double>(),
                r["rwf_bits_per_value"].get<double>());
  }
  return 0;
}

struct BenchArgs {
  std::string model = DefaultModel(), text, calibration, codec = "kvtc", level;
  std::vector<std::string> params;
  uint32_t ctx = 1024, chunk = 256;
  int threads = 0;
  double min_seconds = 1.0;
  bool json = false;
};

int RunBenchCodec(const BenchArgs& a) {
  kvc_bench_codec_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.codec = a.codec.c_str();
  p.level = a.level.empty() ? nullptr : a.level.c_str();
  const std::string params = JoinParams(a.params);
  p.codec_params = params.empty() ? nullptr : params.c_str();
  p.ctx = a.ctx;
  p.chunk = a.chunk;
  p.n_threads = a.threads;
  p.min_seconds = a.min_seconds;
  auto report = kvcodec::BenchCodecJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("codec %s level %s: %u chunks of %u tokens, ratio %.2fx\n", j["codec"].get<std::string>().c_str(),
              j["level"].get<std::string>().c_str(), j["n_chunks"].get<unsigned>(), j["chunk"].get<unsigned>(),
              j["compression_ratio"].get<double>());
  std::printf("  %-8s %12s %12s %12s\n", "", "encode MB/s", "decode MB/s", "memcpy MB/s");
  std::printf("  %-8s %12.0f %12.0f %12.0f\n", "1 thread", j["encode_mb_s_1t"].get<double>(),
              j["decode_mb_s_1t"].get<double>(), j["memcpy_mb_s_1t"].get<double>());
  std::printf("  %-8s %12s %12.0f %12s  (one chunk at a time, a 2-thread pool in the codec)\n", "2 threads", "",
              j["decode_mb_s_2t"].get<double>(), "");
  std::printf("  %-8s %12.0f %12.0f %12.0f  (%u threads)\n", "all", j["encode_mb_s_all"].get<double>(),
              j["decode_mb_s_all"].get<double>(), j["memcpy_mb_s_all"].get<double>(), j["threads"].get<unsigned>());
  return 0;
}

struct BenchVideoArgs {
  std::string model = DefaultModel(), text, preset = "medium";
  uint32_t ctx = 1024, chunk = 256;
  double min_seconds = 0.3;
  bool json = false, quiet = false;
};

int RunBenchVideo(const BenchVideoArgs& a) {
  kvc_bench_video_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.preset = a.preset.c_str();
  p.ctx = a.ctx;
  p.chunk = a.chunk;
  p.min_seconds = a.min_seconds;
  p.quiet = a.quiet ? 1 : 0;
  auto report = kvcodec::BenchVideoJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("video ablation: %u chunks of %u tokens; quant 8-bit ratio %.3fx\n", j["n_chunks"].get<unsigned>(),
              j["chunk"].get<unsigned>(), j["quant8_ratio"].get<double>());
  std::printf("  %-56s %-10s %8s %12s\n", "step", "coder", "ratio", "decode MB/s");
  for (const auto& s : j["steps"]) {
    std::printf("  %-56s %-10s %8.3f %12.1f\n", s["step"].get<std::string>().c_str(),
                s["coder"].get<std::string>().c_str(), s["compression_ratio"].get<double>(),
                s["decode_mb_s"].get<double>());
  }
  std::printf("  neighbouring-token difference variance / variance (2 = independent tokens):\n");
  for (const auto& l : j["neighbour_difference_ratio"]) {
    std::printf("    layer %2u  K %.3f  K (RoPE undone) %.3f  K (token order) %.3f  V %.3f  V (token order) %.3f\n",
                l["layer"].get<unsigned>(), l["k"].get<double>(), l["k_rope_undone"].get<double>(),
                l["k_token_ordered"].get<double>(), l["v"].get<double>(), l["v_token_ordered"].get<double>());
  }
  return 0;
}

// The quality-floor flags of run, serve and bench ttft.
struct QualityArgs {
  std::string profile;
  double max_ppl_delta = 1.0, min_top1 = 0.97;
  void AddTo(CLI::App* app) {
    app->add_option("--profile", profile,
                    "Quality profile (default: <model>.kvprof.json beside the model; without one only raw and quant 8 "
                    "are stored and fetched)");
    app->add_option("--max-ppl-delta", max_ppl_delta, "Largest profiled perplexity change a rung may have, percent")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1e9));
    app->add_option("--min-top1", min_top1, "Smallest profiled top-1 agreement a rung may have")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
  }
  template <typename Params>
  void Set(Params* p) const {
    p->profile = profile.empty() ? nullptr : profile.c_str();
    p->max_ppl_delta = max_ppl_delta;
    p->min_top1 = min_top1;
  }
};

struct RunArgs {
  std::string model = DefaultModel(), store, store_secret, codec = "kvtc", levels, calibration, prompt_file;
  double link_gbps = 0;
  uint32_t chunk = 256, n_generate = 32;
  int threads = 0, fetch_threads = 0;
  bool json = false, no_store = false, no_reuse = false;
  QualityArgs quality;
  double temperature = 0, top_p = 1, min_p = 0, presence_penalty = 0, frequency_penalty = 0;
  int32_t top_k = 0;
  std::optional<uint64_t> seed;
};

std::string FormatGbps(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g Gbps", gbps);
  return buf;
}

int RunRun(const RunArgs& a) {
  std::vector<uint8_t> prompt_bytes;
  if (auto e = kvcodec_cli::ReadInputFile(a.prompt_file, kMaxTextFileBytes, &prompt_bytes); !e.empty()) return Fail(e);
  const std::string prompt(prompt_bytes.begin(), prompt_bytes.end());
  kvc_run_params p{};
  p.model_path = a.model.c_str();
  p.prompt = prompt.c_str();
  p.store_url = a.store.empty() ? nullptr : a.store.c_str();
  p.codec = a.codec.c_str();
  p.levels = a.levels.empty() ? nullptr : a.levels.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.link_gbps = a.link_gbps;
  p.chunk_tokens = a.chunk;
  p.n_generate = a.n_generate;
  p.n_threads = a.threads;
  p.no_store = a.no_store ? 1 : 0;
  p.no_reuse = a.no_reuse ? 1 : 0;
  p.store_secret = a.store_secret.empty() ? nullptr : a.store_secret.c_str();
  a.quality.Set(&p);
  p.temperature = a.temperature;
  p.top_p = a.top_p;
  p.top_k = a.top_k;
  p.min_p = a.min_p;
  p.presence_penalty = a.presence_penalty;
  p.frequency_penalty = a.frequency_penalty;
  p.has_seed = a.seed.has_value() ? 1 : 0;
  p.seed = a.seed.value_or(0);
  p.n_fetch_threads = a.fetch_threads;
  auto report = kvcodec::RunJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  std::printf("%s\n\n", j["text"].get<std::string>().c_str());
  std::string variants;
  for (const auto& v : j["variants"]) variants += (variants.empty() ? "" : " ") + v.get<std::string>();
  std::printf("store %s: reused %u of %u prompt tokens (%u of %u whole chunks%s%s), prefilled %u\n",
              j["store"].get<std::string>().c_str(), j["reused_tokens"].get<unsigned>(),
              j["prompt_tokens"].get<unsigned>(), j["chunks_fetched"].get<unsigned>(),
              j["chunks_reusable"].get<unsigned>(), variants.empty() ? "" : ": ", variants.c_str(),
              j["prefilled_tokens"].get<unsigned>());
  if (!j["quality_floor"].get<std::string>().empty()) {
    std::printf("quality floor: %s\n", j["quality_floor"].get<std::string>().c_str());
  }
  if (!j["fallback"].get<std::string>().empty()) {
    std::printf("reuse stopped early, recomputed from there: %s\n", j["fallback"].get<std::string>().c_str());
  }
  std::printf("TTFT %.3f s = lookup %.3f + fetch %.3f (decode %.3f, overlapped) + restore %.3f + prefill %.3f\n",
              j["ttft_s"].get<double>(), j["lookup_s"].get<double>(), j["fetch_s"].get<double>(),
              j["decode_s"].get<double>(), j["restore_s"].get<double>(), j["prefill_s"].get<double>());
  const double link = j["link_gbps"].get<double>();
  std::printf(
      "fetched %llu bytes (link %s); generated %u tokens in %.3f s; stored %u new chunks (%llu bytes, %s) "
      "in %.3f s\n",
      static_cast<unsigned long long>(j["bytes_fetched"].get<uint64_t>()),
      link > 0 ? FormatGbps(link).c_str() : "uncapped", j["generated_tokens"].get<unsigned>(),
      j["generate_s"].get<double>(), j["chunks_stored"].get<unsigned>(),
      static_cast<unsigned long long>(j["bytes_stored"].get<uint64_t>()), j["codec"].get<std::string>().c_str(),
      j["store_s"].get<double>());
  return 0;
}

struct BenchTtftArgs {
  std::string model = DefaultModel(), text, calibration, codecs, link_gbps, prefix_tokens;
  uint32_t prompt_tokens = 4096, chunk = 256, repeats = 3;
  int threads = 0, fetch_threads = 0;
  bool json = false, quiet = false;
  QualityArgs quality;
};

int RunBenchTtft(const BenchTtftArgs& a) {
  kvc_bench_ttft_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.codecs = a.codecs.empty() ? nullptr : a.codecs.c_str();
  p.link_gbps = a.link_gbps.empty() ? nullptr : a.link_gbps.c_str();
  p.prompt_tokens = a.prompt_tokens;
  p.chunk_tokens = a.chunk;
  p.repeats = a.repeats;
  a.quality.Set(&p);
  p.n_threads = a.threads;
  p.quiet = a.quiet ? 1 : 0;
  p.prefix_tokens = a.prefix_tokens.empty() ? nullptr : a.prefix_tokens.c_str();
  p.n_fetch_threads = a.fetch_threads;
  auto report = kvcodec::BenchTtftJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  for (const auto& pj : j["prefixes"]) {
    std::printf("prefix %u tokens stored, %u-token prompt: recompute %.3f s\n", pj["prefix_tokens"].get<unsigned>(),
                pj["prompt_tokens"].get<unsigned>(), pj["recompute_ttft_s"].get<double>());
  }
  std::printf("  %7s %-9s %8s %9s %9s %9s %9s %9s %9s %7s %9s\n", "prefix", "codec", "Gbps", "TTFT s", "fetch",
              "decode", "restore", "prefill", "bound", "/bound", "peak MB");
  for (const auto& r : j["rows"]) {
    std::printf("  %7u %-9s %8g %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %7.3f %9.1f\n", r["prefix_tokens"].get<unsigned>(),
                r["codec"].get<std::string>().c_str(), r["link_gbps"].get<double>(), r["ttft_s"].get<double>(),
                r["fetch_s"].get<double>(), r["decode_s"].get<double>(), r["restore_s"].get<double>(),
                r["prefill_s"].get<double>(), r["bound_s"].get<double>(), r["ttft_over_bound"].get<double>(),
                r["peak_rss_bytes"].get<double>() / 1e6);
  }
  std::printf("  (%s: see --json)\n", j["projection"]["label"].get<std::string>().c_str());
  return 0;
}

struct BenchServeArgs {
  std::string model = DefaultModel(), text, calibration, codec = "kvtc", configs = "none,fifo,kv-aware", url;
  double link_gbps = 0.003, rate = 0.75, shared_fraction = 0.5;
  uint32_t requests = 60, prefixes = 4, prefix_tokens = 3072, suffix_tokens = 24, unique_tokens = 160, max_tokens = 16;
  int parallel = 8, fetch_threads = 1, threads = 0;
  uint64_t seed = 1;
  bool plan_recompute = false, json = false, quiet = false;
};

int RunBenchServe(const BenchServeArgs& a) {
  kvc_bench_serve_params p{};
  p.model_path = a.model.c_str();
  p.text_path = a.text.empty() ? nullptr : a.text.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.codec = a.codec.c_str();
  p.configs = a.configs.c_str();
  p.url = a.url.empty() ? nullptr : a.url.c_str();
  p.link_gbps = a.link_gbps;
  p.rate = a.rate;
  p.shared_fraction = a.shared_fraction;
  p.requests = a.requests;
  p.prefixes = a.prefixes;
  p.prefix_tokens = a.prefix_tokens;
  p.suffix_tokens = a.suffix_tokens;
  p.unique_tokens = a.unique_tokens;
  p.max_tokens = a.max_tokens;
  p.n_parallel = a.parallel;
  p.n_fetch_threads = a.fetch_threads;
  p.n_threads = a.threads;
  p.seed = a.seed;
  p.plan_recompute = a.plan_recompute ? 1 : 0;
  p.quiet = a.quiet ? 1 : 0;
  auto report = kvcodec::BenchServeJson(p);
  if (!report.ok()) return Fail(report.error());
  if (a.json) {
    std::cout << report.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(report.value());
  const auto& o = j["options"];
  const std::string against = o.contains("url")                  ? "server " + o["url"].get<std::string>()
                              : o["link_gbps"].get<double>() > 0 ? "link " + FormatGbps(o["link_gbps"].get<double>())
                                                                 : std::string("uncapped link");
  std::printf(
      "%u requests per configuration at %g/s, %.0f%% sharing one of %u %u-token documents, %u tokens "
      "generated each; %s\n",
      o["requests"].get<unsigned>(), o["rate"].get<double>(), 100 * o["shared_fraction"].get<double>(),
      o["prefixes"].get<unsigned>(), o["prefix_tokens"].get<unsigned>(), o["max_tokens"].get<unsigned>(),
      against.c_str());
  std::printf("  %-9s %-13s %4s %4s %8s %8s %8s %8s %9s %8s\n", "config", "class", "n", "err", "TTFT p50", "p90", "p99",
              "hit rate", "tok/s", "req/s");
  for (const auto& c : j["configs"]) {
    bool first = true;
    for (const char* cls : {"shared_prefix", "no_prefix"}) {
      const auto& k = c["classes"][cls];
      std::printf("  %-9s %-13s %4d %4d %8.3f %8.3f %8.3f %8.3f", first ? c["name"].get<std::string>().c_str() : "",
                  cls, k["n"].get<int>(), k["errors"].get<int>(), k["ttft_s"]["p50"].get<double>(),
                  k["ttft_s"]["p90"].get<double>(), k["ttft_s"]["p99"].get<double>(), k["hit_rate"].get<double>());
      if (first) {
        std::printf(" %9.1f %8.2f", c["completion_tokens_per_s"].get<double>(), c["requests_per_s"].get<double>());
      }
      std::printf("\n");
      first = false;
    }
  }
  for (const auto& [key, value] : j["criteria"].items()) std::printf("  %s: %s\n", key.c_str(), value.dump().c_str());
  return 0;
}

struct ServeArgs {
  std::string model = DefaultModel(), store, store_secret, codec = "kvtc", calibration, host = "127.0.0.1", alias;
  std::string chat_template, api_key, metrics_key;
  int port = 8080;
  double link_gbps = 0;
  uint64_t max_body = 1 << 20;
  double request_timeout = 30;
  int max_connections = 512;
  uint32_t n_ctx = 4096, max_tokens = 64;
  int threads = 0, parallel = 4, fetch_threads = 1;
  std::string scheduler = "kv-aware";
  bool no_reuse = false;
  QualityArgs quality;
};

int RunServe(const ServeArgs& a) {
  // SIGINT/SIGTERM are taken by this thread alone (blocked before any server thread exists), so
  // shutdown runs here, not in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  kvc_serve_params p{};
  p.model_path = a.model.c_str();
  p.store_url = a.store.empty() ? nullptr : a.store.c_str();
  p.codec = a.codec.c_str();
  p.calibration = a.calibration.empty() ? nullptr : a.calibration.c_str();
  p.host = a.host.c_str();
  p.port = a.port;
  p.link_gbps = a.link_gbps;
  p.n_ctx = a.n_ctx;
  p.default_max_tokens = a.max_tokens;
  p.n_threads = a.threads;
  p.n_parallel = a.parallel;
  p.n_fetch_threads = a.fetch_threads;
  p.scheduler = a.scheduler.c_str();
  p.no_reuse = a.no_reuse ? 1 : 0;
  a.quality.Set(&p);
  p.store_secret = a.store_secret.empty() ? nullptr : a.store_secret.c_str();
  p.max_body_bytes = a.max_body;
  p.request_timeout_s = a.request_timeout;
  p.max_connections = a.max_connections;
  p.alias = a.alias.empty() ? nullptr : a.alias.c_str();
  p.chat_template = a.chat_template.empty() ? nullptr : a.chat_template.c_str();
  p.api_key = a.api_key.empty() ? nullptr : a.api_key.c_str();
  p.metrics_key = a.metrics_key.empty() ? nullptr : a.metrics_key.c_str();
  kvc_server* server = nullptr;
  if (kvc_server_create(&p, &server) != KVC_OK) return Fail(kvc_last_error());
  if (kvc_server_start(server) != KVC_OK) {
    const std::string error = kvc_last_error();
    kvc_server_free(server);
    return Fail(error);
  }
  std::fprintf(stderr, "kvcodec: serving %s on http://%s:%d (store %s); SIGINT or SIGTERM stops\n", a.model.c_str(),
               a.host.c_str(), kvc_server_port(server), a.store.empty() ? "default" : a.store.c_str());
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kvcodec: signal %d, finishing the requests in flight and stopping\n", sig);
  kvc_server_stop(server);
  kvc_server_free(server);
  return 0;
}

int RunInspect(const std::string& path, bool json) {
  std::vector<uint8_t> bytes;
  if (auto e = kvcodec_cli::ReadInputFile(path, kMaxKvFileBytes, &bytes); !e.empty()) return Fail(e);
  auto info = kvcodec::InspectJson(bytes);
  if (!info.ok()) return Fail(path + ": " + info.error().message);
  if (json) {
    std::cout << info.value() << "\n";
    return 0;
  }
  const auto j = nlohmann::json::parse(info.value());
  std::printf("%s: .kvc v%u, %llu bytes\n", path.c_str(), j["format_version"].get<unsigned>(),
              j["file_bytes"].get<unsigned long long>());
  std::printf("  codec        %s (id %u, v%u), level %s, %llu param bytes\n", j["codec"].get<std::string>().c_str(),
              j["codec_id"].get<unsigned>(), j["codec_version"].get<unsigned>(), j["level"].get<std::string>().c_str(),
              j["codec_params_bytes"].get<unsigned long long>());
  std::printf("  shape        %u layers x %u tokens x %u kv heads x %u dims, %s\n", j["n_layers"].get<unsigned>(),
              j["n_tokens"].get<unsigned>(), j["n_kv_heads"].get<unsigned>(), j["head_dim"].get<unsigned>(),
              j["dtype"].get<std::string>().c_str());
  std::printf("  tokens       [%u, %u), first position %d\n", j["token_begin"].get<unsigned>(),
              j["token_begin"].get<unsigned>() + j["n_tokens"].get<unsigned>(), j["pos_begin"].get<int>());
  std::printf("  model        %s\n", j["model_fingerprint"].get<std::string>().c_str());
  std::printf("  ratio        %.2fx vs fp16 (%llu bytes)\n", j["compression_ratio"].get<double>(),
              j["bytes_fp16"].get<unsigned long long>());
  int i = 0;
  for (const auto& s : j["sections"]) {
    std::printf("  section %-4d tag %s, %llu bytes\n", i++, s["tag"].get<std::string>().c_str(),
                s["bytes"].get<unsigned long long>());
  }
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{"kvcodec: compress, inspect and evaluate LLM KV caches"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kvc_version());
  // One choice for the whole process (the machine's GPU), given before or after the command:
  // subcommands pass options they do not know up to here.
  app.fallthrough();
  std::string video_decoder = "auto";
  app.add_option("--video-decoder", video_decoder,
                 "Engine that decodes video KV: auto (NVDEC where a CUDA device is present and the stream is one it "
                 "decodes, else the CPU), cpu, or nvdec (an error without a device)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "nvdec"}));

  CodecsArgs cs;
  auto* codecs = app.add_subcommand(
      "codecs", "List codecs, their levels and parameters (with --model: the model's quality profile and floor)");
  codecs->add_flag("--json", cs.json, "Print JSON");
  codecs->add_option("--model", cs.model, "Show this model's quality profile and which rungs are within the floor");
  codecs->add_option("--profile", cs.profile, "Quality profile (default: <model>.kvprof.json beside the model)");
  codecs->add_option("--calibration", cs.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  codecs->add_option("--max-ppl-delta", cs.max_ppl_delta, "Largest perplexity change allowed, percent")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  codecs->add_option("--min-top1", cs.min_top1, "Smallest top-1 agreement allowed")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));

  ProfileArgs pa;
  auto* profile = app.add_subcommand(
      "profile",
      "Measure every rung of every codec on the model (held-back calibration text) and write its quality profile");
  profile->add_option("--model", pa.model, "GGUF model")->capture_default_str();
  profile->add_option("--text", pa.text, "Text (default: calib.txt beside the model; its last windows are used)");
  profile->add_option("--calibration", pa.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  profile->add_option("--out", pa.out, "Output (default: <model>.kvprof.json)");
  profile->add_option("--docs", pa.docs, "Documents (0: enough for 1024 scored positions, at least 8)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 100000u));
  profile->add_option("--ctx", pa.ctx, "Context tokens per document (0: min(1024, training context) - cont - 1)")
      ->capture_default_str();
  profile->add_option("--cont", pa.cont, "Continuation tokens scored (0: min(128, training context / 4))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  profile->add_option("--threads", pa.threads, "Threads for llama.cpp (0: all cores)");
  profile->add_flag("--json", pa.json, "Print the profile as JSON");
  profile->add_flag("--quiet", pa.quiet, "No progress line");

  EvalArgs ev;
  auto* eval = app.add_subcommand("eval", "Measure a codec's accuracy on a real model (compress, restore, compare)");
  eval->add_option("--model", ev.model, "GGUF model")->capture_default_str();
  eval->add_option("--codec", ev.codec, "Codec (see `kvcodec codecs`)")->capture_default_str();
  eval->add_option("--level", ev.level, "Codec level (default: the codec's default)");
  eval->add_option("--param", ev.params, "Codec parameter key=value (repeatable)");
  eval->add_option("--docs", ev.docs, "Documents to evaluate")->capture_default_str()->check(CLI::Range(1u, 100000u));
  eval->add_option("--ctx", ev.ctx, "Context tokens whose KV is compressed")
      ->capture_default_str()
      ->check(CLI::Range(2u, 1u << 20));
  eval->add_option("--cont", ev.cont, "Continuation tokens scored")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  eval->add_option("--text", ev.text, "Evaluation text (default: eval.txt beside the model)");
  eval->add_option("--token-file", ev.token_file,
                   "Pre-tokenised documents: one per line of space-separated token ids (BOS added when missing); "
                   "the first --docs lines of at least ctx + cont + 1 tokens are used")
      ->excludes("--text");
  eval->add_option("--cache-type", ev.cache_type, "llama.cpp KV cache type")
      ->check(CLI::IsMember({"f16", "f32", "bf16"}))
      ->capture_default_str();
  eval->add_option("--threads", ev.threads, "Threads for llama.cpp (0: all cores)");
  eval->add_option("--calibration", ev.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  eval->add_flag("--json", ev.json, "Print the report as JSON");
  eval->add_flag("--quiet", ev.quiet, "No progress line");

  EncodeArgs en;
  auto* encode = app.add_subcommand("encode", "Encode a KV cache (from a model + text, or a KV dump) into a .kvc file");
  encode->add_option("--model", en.model, "GGUF model (prefills --text; fingerprints the file)")->capture_default_str();
  encode->add_option("--text", en.text, "Text file to prefill");
  encode->add_option("--tokens", en.tokens, "Keep at most this many tokens of the text");
  encode->add_option("--kv", en.kv_dump, "KV dump: llama.cpp sequence-state bytes (llama_state_seq_get_data)");
  encode->add_option("--kv-heads", en.kv_heads, "KV heads of the dump (default: from --model)");
  encode->add_option("--codec", en.codec, "Codec")->capture_default_str();
  encode->add_option("--level", en.level, "Codec level");
  encode->add_option("--param", en.params, "Codec parameter key=value (repeatable)");
  encode->add_option("--token-begin", en.token_begin, "First token to encode");
  encode->add_option("--n-tokens", en.n_tokens, "Tokens to encode (0: to the end)");
  encode->add_option("--cache-type", en.cache_type, "llama.cpp KV cache type")
      ->check(CLI::IsMember({"f16", "f32", "bf16"}))
      ->capture_default_str();
  encode->add_option("--calibration", en.calibration, "KVTC calibration (.kvcal)");
  encode->add_option("-o,--out", en.out, "Output .kvc file")->required();

  std::string decode_in, decode_out, decode_model;
  auto* decode =
      app.add_subcommand("decode", "Decode and verify a .kvc file (optionally to a llama.cpp sequence state)");
  decode->add_option("file", decode_in, ".kvc file")->required();
  decode->add_option("-o,--out", decode_out, "Write the KV as llama.cpp sequence-state bytes");
  decode->add_option("--model", decode_model, "Check the file was made for this model");
  std::vector<std::string> decode_calibrations;
  decode->add_option("--calibration", decode_calibrations, "KVTC calibration(s) the file may name");

  CalibrateArgs ca;
  auto* calibrate = app.add_subcommand("calibrate", "Fit KVTC's PCA bases and bit allocations for a model");
  calibrate->add_option("--model", ca.model, "GGUF model")->capture_default_str();
  calibrate->add_option("--text", ca.text, "Calibration text (default: calib.txt beside the model)");
  calibrate->add_option("--out", ca.out, "Output .kvcal (default: <model>.kvcal)");
  calibrate->add_option("--tokens", ca.tokens, "Use at most this many tokens of the text (0: all)");
  calibrate
      ->add_option("--token-file", ca.token_file,
                   "Pre-tokenised calibration text: one document per line of space-separated token ids")
      ->excludes("--text");
  calibrate->add_option("--group", ca.grouping, "Features sharing a basis (auto: the better of layer and layer-head)")
      ->check(CLI::IsMember({"auto", "layer", "layer-head", "all"}))
      ->capture_default_str();
  calibrate->add_option("--quantizer", ca.quantizer, "How coefficients are quantised (auto: the better one, measured)")
      ->check(CLI::IsMember({"auto", "token-group", "component"}))
      ->capture_default_str();
  calibrate
      ->add_option("--group-size", ca.group_size, "Token-group components sharing one scale (0: the best of 8, 16, 32)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  calibrate->add_option("--window", ca.window, "Tokens per prefill (0: min(1024, the model's training context))")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  calibrate->add_option("--chunk", ca.chunk, "Tokens per chunk the coded sizes are measured at")
      ->capture_default_str()
      ->check(CLI::Range(16u, 1u << 20));
  calibrate->add_option("--threads", ca.threads, "Threads for llama.cpp (0: all cores)");
  calibrate->add_flag("--json", ca.json, "Print the report as JSON");
  calibrate->add_flag("--no-profile", ca.no_profile,
                      "Do not measure the quality profile afterwards (`kvcodec profile`)");
  calibrate->add_flag("--quiet", ca.quiet, "No progress line");

  BenchArgs be;
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* bench_codec = bench->add_subcommand("codec", "Codec encode/decode MB/s on a real KV cache, beside memcpy");
  bench_codec->add_option("--model", be.model, "GGUF model")->capture_default_str();
  bench_codec->add_option("--codec", be.codec, "Codec")->capture_default_str();
  bench_codec->add_option("--level", be.level, "Codec level");
  bench_codec->add_option("--param", be.params, "Codec parameter key=value (repeatable)");
  bench_codec->add_option("--calibration", be.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  bench_codec->add_option("--text", be.text, "Text to prefill (default: eval.txt beside the model)");
  bench_codec->add_option("--ctx", be.ctx, "Tokens prefilled")->capture_default_str();
  bench_codec->add_option("--chunk", be.chunk, "Tokens per encoded chunk")->capture_default_str();
  bench_codec->add_option("--threads", be.threads, "Threads for the all-cores figures (0: every core)");
  bench_codec->add_option("--min-seconds", be.min_seconds, "Time per measurement")->capture_default_str();
  bench_codec->add_flag("--json", be.json, "Print JSON");
  BenchVideoArgs bv;
  auto* bench_video = bench->add_subcommand(
      "video", "The video codec's layout ablation: 8-bit codes, general-purpose coders, each layout step x coder");
  bench_video->add_option("--model", bv.model, "GGUF model")->capture_default_str();
  bench_video->add_option("--text", bv.text, "Text to prefill (default: eval.txt beside the model)");
  bench_video->add_option("--ctx", bv.ctx, "Tokens prefilled")->capture_default_str();
  bench_video->add_option("--chunk", bv.chunk, "Tokens per encoded chunk")->capture_default_str();
  bench_video->add_option("--preset", bv.preset, "x265/x264 preset")->capture_default_str();
  bench_video->add_option("--min-seconds", bv.min_seconds, "Time per decode measurement")->capture_default_str();
  bench_video->add_flag("--json", bv.json, "Print JSON");
  bench_video->add_flag("--quiet", bv.quiet, "No progress line");

  ServeArgs sv;
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible completion server with remote KV reuse");
  serve->add_option("--model", sv.model, "GGUF model")->capture_default_str();
  serve->add_option("--store", sv.store,
                    "Store URL: dir:///path, mem://, redis://[user[:password]@]host:port, "
                    "redis-cluster://[user[:password]@]h:p,... (default: the embedded disk store)");
  serve->add_option("--store-secret", sv.store_secret, kStoreSecretHelp)->envname("KVCODEC_STORE_SECRET");
  serve->add_option("--max-body", sv.max_body, "Largest request body in bytes (larger: 413)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  serve
      ->add_option("--request-timeout", sv.request_timeout,
                   "Seconds a request may take to arrive whole (slower: 408, connection closed)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  serve->add_option("--max-connections", sv.max_connections, "Connections served at once, a thread each")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  serve->add_option("--codec", sv.codec, "Codec for new chunks")->capture_default_str();
  serve->add_option("--calibration", sv.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  sv.quality.AddTo(serve);
  serve->add_option("--host", sv.host, "Address to listen on")->capture_default_str();
  serve->add_option("--alias", sv.alias,
                    "Model id clients see in /v1/models and responses (default: the model's file name without .gguf)");
  serve->add_option("--chat-template", sv.chat_template,
                    "Chat template: a llama.cpp built-in's name (chatml, llama3, mistral-v7, ...) or a template's "
                    "text (default: the model's own; without one, \"role: content\" lines)");
  serve
      ->add_option("--api-key", sv.api_key,
                   "Require \"Authorization: Bearer KEY\" on every endpoint but /health and /metrics")
      ->envname("KVCODEC_API_KEY");
  serve->add_option("--metrics-key", sv.metrics_key, "Require \"Authorization: Bearer KEY\" on /metrics")
      ->envname("KVCODEC_METRICS_KEY");
  serve->add_option("--port", sv.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  serve->add_option("--link-gbps", sv.link_gbps, "Cap the fetch link at this rate (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--ctx", sv.n_ctx, "Tokens per request (prompt + completion)")->capture_default_str();
  serve->add_option("--max-tokens", sv.max_tokens, "Completion tokens when a request does not say")
      ->capture_default_str();
  serve->add_option("--threads", sv.threads, "Threads for llama.cpp (0: the cores --fetch-threads leave)");
  serve->add_option("--parallel", sv.parallel, "Requests decoded together (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  serve
      ->add_option("--fetch-threads", sv.fetch_threads,
                   "Pool workers fetched chunks decode on and new chunks encode on (the cores reuse takes from "
                   "generation)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  serve
      ->add_option("--scheduler", sv.scheduler,
                   "kv-aware: requests with nothing to fetch never wait for "
                   "another's fetch; fifo: strict arrival order")
      ->capture_default_str()
      ->check(CLI::IsMember({"kv-aware", "fifo"}));
  serve->add_flag("--no-reuse", sv.no_reuse, "Never look up, fetch or store chunks (the baseline)");

  BenchTtftArgs bt;
  auto* bench_ttft = bench->add_subcommand(
      "ttft",
      "TTFT of a long prompt reusing its stored prefix, per codec and link rate, beside recompute; "
      "plus a labelled projection to 7B-70B shapes");
  bench_ttft->add_option("--model", bt.model, "GGUF model")->capture_default_str();
  bench_ttft->add_option("--text", bt.text, "Text the prompt is taken from (default: eval.txt beside the model)");
  bench_ttft->add_option("--calibration", bt.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  bt.quality.AddTo(bench_ttft);
  bench_ttft->add_option("--codecs", bt.codecs, "Codecs, comma-separated (default: every codec)");
  bench_ttft->add_option("--link-gbps", bt.link_gbps,
                         "Link rates, comma-separated (default: 0.01,0.03,0.1,0.3,1,3,10)");
  bench_ttft->add_option("--prompt-tokens", bt.prompt_tokens, "Prompt length (without --prefix-tokens)")
      ->capture_default_str();
  bench_ttft->add_option("--prefix-tokens", bt.prefix_tokens,
                         "Stored prefix lengths, comma-separated whole chunks, each followed by one chunk to prefill "
                         "(e.g. 1024,4096,16384,32768; the text repeats when shorter)");
  bench_ttft->add_option("--fetch-threads", bt.fetch_threads, "Workers chunks decode on (0: one per core)");
  bench_ttft->add_option("--chunk", bt.chunk, "Tokens per chunk")->capture_default_str();
  bench_ttft->add_option("--repeats", bt.repeats, "Runs per point (median reported)")->capture_default_str();
  bench_ttft->add_option("--threads", bt.threads, "Threads for llama.cpp (0: all cores)");
  bench_ttft->add_flag("--json", bt.json, "Print JSON");
  bench_ttft->add_flag("--quiet", bt.quiet, "No progress line");

  BenchServeArgs bs;
  auto* bench_serve = bench->add_subcommand(
      "serve",
      "Load generator for the completion server: shared-prefix and no-prefix streaming requests at a "
      "Poisson rate against no reuse, FIFO and KV-aware in-process servers; TTFT p50/p90/p99 per class, "
      "throughput, hit rate");
  bench_serve->add_option("--model", bs.model, "GGUF model")->capture_default_str();
  bench_serve->add_option("--text", bs.text, "Text the prompts are cut from (default: eval.txt beside the model)");
  bench_serve->add_option("--calibration", bs.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  bench_serve->add_option("--codec", bs.codec, "Codec the servers store chunks with")->capture_default_str();
  bench_serve->add_option("--configs", bs.configs, "Configurations, comma-separated: none, fifo, kv-aware")
      ->capture_default_str();
  bench_serve->add_option("--url", bs.url, "Instead, one configuration against a running server (http://host:port)");
  bench_serve->add_option("--link-gbps", bs.link_gbps, "The in-process servers' fetch link cap (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bench_serve->add_option("--rate", bs.rate, "Requests per second (Poisson arrivals)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench_serve->add_option("--requests", bs.requests, "Requests per configuration")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  bench_serve->add_option("--shared-fraction", bs.shared_fraction, "Fraction of requests sharing a long prefix")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  bench_serve->add_option("--prefixes", bs.prefixes, "Distinct shared documents")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  bench_serve->add_option("--prefix-tokens", bs.prefix_tokens, "Tokens per shared document")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--suffix-tokens", bs.suffix_tokens, "Each shared-prefix request's own tokens after it")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--unique-tokens", bs.unique_tokens, "No-prefix prompt length (0.8x to 1.2x this)")
      ->capture_default_str()
      ->check(CLI::Range(5u, 1u << 20));
  bench_serve->add_option("--max-tokens", bs.max_tokens, "Completion tokens per request")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  bench_serve->add_option("--parallel", bs.parallel, "The servers' requests decoded together")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  bench_serve
      ->add_option("--fetch-threads", bs.fetch_threads, "The servers' pool workers for decoding and encoding chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  bench_serve->add_option("--threads", bs.threads, "Threads for llama.cpp (0: the cores the fetch threads leave)");
  bench_serve->add_option("--seed", bs.seed, "Seed of the trace (arrivals, classes, prompts)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  bench_serve->add_flag("--plan-recompute", bs.plan_recompute,
                        "Let the servers' planner recompute chunks it predicts faster to prefill than to fetch "
                        "(default: always fetch, so every configuration schedules the same fetches)");
  bench_serve->add_flag("--json", bs.json, "Print JSON");
  bench_serve->add_flag("--quiet", bs.quiet, "No progress line");

  RunArgs ru;
  auto* run = app.add_subcommand("run",
                                 "The main job: reuse a prompt's stored KV prefix, prefill the rest, generate, "
                                 "store the new chunks; prints the text and the TTFT breakdown");
  run->add_option("prompt", ru.prompt_file, "Prompt text file")->required();
  run->add_option("--model", ru.model, "GGUF model")->capture_default_str();
  run->add_option("--store", ru.store,
                  "Store URL: dir:///path, mem://, redis://[user[:password]@]host:port, "
                  "redis-cluster://[user[:password]@]h:p,... (default: the embedded disk store, $KVCODEC_STORE or "
                  "~/.cache/kvcodec/store)");
  run->add_option("--store-secret", ru.store_secret, kStoreSecretHelp)->envname("KVCODEC_STORE_SECRET");
  run->add_option("--codec", ru.codec, "Codec for new chunks")->capture_default_str();
  run->add_option("--levels", ru.levels, "Levels to store, comma-separated (default: the codec's ladder)");
  run->add_option("--calibration", ru.calibration, "KVTC calibration (default: <model>.kvcal if present)");
  ru.quality.AddTo(run);
  run->add_option("--link-gbps", ru.link_gbps, "Cap the fetch link at this rate (emulated in process; 0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--chunk", ru.chunk, "Tokens per chunk")->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  run->add_option("-n,--generate", ru.n_generate, "Tokens to generate")->capture_default_str();
  run->add_option("--threads", ru.threads, "Threads for llama.cpp (0: all cores)");
  run->add_option("--fetch-threads", ru.fetch_threads,
                  "Workers fetched chunks decode on and new chunks encode on (0: one per core)")
      ->check(CLI::Range(0, 64));
  run->add_option("--temp", ru.temperature, "Sampling temperature (0: greedy decoding)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  run->add_option("--top-p", ru.top_p, "Nucleus sampling: keep the most likely tokens holding this probability")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  run->add_option("--top-k", ru.top_k, "Keep only the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--min-p", ru.min_p, "Drop tokens under this fraction of the best one's probability")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--presence-penalty", ru.presence_penalty, "Subtracted once from a token already generated")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  run->add_option("--frequency-penalty", ru.frequency_penalty, "Subtracted per time a token was generated")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  run->add_option("--seed", ru.seed,
                  "Seed for sampling: the same seed and prompt give the same text (default: random)");
  run->add_flag("--no-store", ru.no_store, "Do not store the prompt's new chunks");
  run->add_flag("--no-reuse", ru.no_reuse, "Ignore stored chunks (recompute everything)");
  run->add_flag("--json", ru.json, "Print JSON");

  std::string inspect_in;
  bool inspect_json = false;
  auto* inspect = app.add_subcommand("inspect", "Print a .kvc file's header and sections");
  inspect->add_option("file", inspect_in, ".kvc file")->required();
  inspect->add_flag("--json", inspect_json, "Print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(std::string(e.what()) + " (see --help)");
  }

  if (kvc_set_video_decoder(video_decoder.c_str()) != KVC_OK) return Fail(kvc_last_error());
  if (*codecs) return RunCodecs(cs);
  if (*profile) return RunProfile(pa);
  if (*eval) return RunEval(ev);
  if (*run) return RunRun(ru);
  if (*serve) return RunServe(sv);
  if (*encode) return RunEncode(en);
  if (*decode) return RunDecode(decode_in, decode_out, decode_model, decode_calibrations);
  if (*calibrate) return RunCalibrate(ca);
  if (*bench_codec) return RunBenchCodec(be);
  if (*bench_video) return RunBenchVideo(bv);
  if (*bench_ttft) return RunBenchTtft(bt);
  if (*bench_serve) return RunBenchServe(bs);
  if (*inspect) return RunInspect(inspect_in, inspect_json);
  return Fail("no command");
}

// No exception ends the process with an abort: whatever escapes (a bug, memory exhaustion) is one
// error line and exit status 1.
int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::bad_alloc&) {
    return Fail("out of memory");
  } catch (const std::exception& e) {
    return Fail(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return Fail("unexpected exception");
  }
}
