// What every way into reuse starts from, written once: `kvcodec run` (RunJob), `kvcodec serve`
// (CompletionServer::Create), `kvcodec bench ttft` (RunTtftBenchJson), and the C API's reuse
// calls (kvc_reuse_restore, kvc_reuse_store, kvc_quality_floor_json). The options are checked
// once, here, at the edge, before anything is loaded or opened: a codec that does not exist, a
// chunk of no tokens, a link rate that is negative or not a number, fetch threads outside their
// range, quality limits outside theirs, levels the codec does not have. Then the model is
// loaded (and must keep a KV cache), its calibration is loaded, the quality floor decided, what
// new chunks are stored as planned, and the store opened with the one policy: a malformed URL is
// the caller's error; a store that cannot be reached is a warning and no store (or, for a
// server, a store that is down and retried). What is set up can be trusted by the layers below:
// they do not check these values again.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "fetch/store_chunks.h"
#include "llama/llama_model.h"
#include "reuse/model_profile.h"
#include "store/chunk_key.h"
#include "store/reconnecting_store.h"
#include "store/store.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {

// Fetch threads a request may ask for (the fetch pool's workers).
inline constexpr int kMaxFetchThreads = 64;

// How SetUpReuse opens the store.
enum class StoreOpening {
  kNone,  // not at all: the caller has its own (the C API, the TTFT bench's memory store) or none
  // OpenStore once (`run`): one that cannot be reached is a warning (ReuseSetup::warnings) and no
  // store; the request recomputes and stores nothing.
  kOnce,
  // ReconnectingStore (`serve`): one that cannot be reached is down and retried in the background.
  kReconnecting,
};

struct ReuseSetupOptions {
  std::string model_path;
  std::string calibration;  // kvtc's .kvcal; empty: <model>.kvcal beside the model, if any
  std::string profile;      // quality profile; empty: <model>.kvprof.json beside the model, if any
  QualityLimits quality;    // which profiled rungs may be stored and fetched
  // How new chunks are stored (PlanStoredRungs). Empty: no plan, the quality floor alone (the
  // TTFT bench stores each codec it measures; a C API restore stores nothing).
  std::string codec = "kvtc";
  // Exactly these levels of `codec`; empty: raw and the codec's levels within the floor. Levels
  // asked for of a codec that needs a calibration need the model's calibration.
  std::vector<std::string> levels;
  uint32_t chunk_tokens = kDefaultChunkTokens;
  double link_gbps = 0;   // in-process link cap for fetches; 0: none
  int fetch_threads = 0;  // in min_fetch_threads..kMaxFetchThreads; 0: one per core
  int min_fetch_threads = 0;
  // false: neither floor nor plan (a server that never reuses: nothing is stored or fetched).
  bool decide_floor = true;
  // false: a model llama.cpp keeps no KV cache for is set up too (its floor, reported alone).
  bool require_kv = true;
  StoreOpening store = StoreOpening::kNone;
  std::string store_url;       // empty: DefaultStoreUrl()
  std::string store_secret;    // non-empty: objects sealed and checked with HMAC-SHA256 (StoreOptions)
  ReconnectOptions reconnect;  // StoreOpening::kReconnecting
  // The caller's own checks of the model it loaded (a prompt's tokens against its vocabulary),
  // run before the calibration, the floor and the store are touched; may be empty.
  std::function<Status(const LlamaModel&)> check_model;
};

// The options every caller's own options spell the same way (RunOptions, ServerOptions,
// TtftBenchOptions), copied by name; the caller sets the rest (store opening, floor, KV).
template <typename Options>
ReuseSetupOptions ReuseSetupOptionsOf(const Options& o) {
  ReuseSetupOptions s;
  s.model_path = o.model_path;
  s.calibration = o.calibration;
  s.profile = o.profile;
  s.quality = o.quality;
  s.chunk_tokens = o.chunk_tokens;
  s.fetch_threads = o.fetch_threads;
  if constexpr (requires { s.codec = o.codec; }) s.codec = o.codec;
  if constexpr (requires { s.levels = o.levels; }) s.levels = o.levels;
  if constexpr (requires { s.link_gbps = o.link_gbps; }) s.link_gbps = o.link_gbps;
  if constexpr (requires { s.store_url = o.store_url; }) s.store_url = o.store_url;
  if constexpr (requires { s.store_secret = o.store_secret; }) s.store_secret = o.store_secret;
  return s;
}

// The floor a model's requests get and what their new chunks are stored as.
struct ReusePlan {
  QualityFloor floor;
  std::vector<StoredRung> rungs;  // raw first; empty without a codec (ReuseSetupOptions::codec)
};

struct ReuseSetup {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<CalibrationRegistry> calibrations;  // the model's, if it has one
  ReusePlan plan;
  std::string store_url;  // the URL opened (or that would be), without any password
  // StoreOpening::kOnce: the store, or null when it could not be reached (a warning says so).
  std::unique_ptr<Store> store;
  // StoreOpening::kReconnecting: the store, perhaps down.
  std::unique_ptr<ReconnectingStore> reconnecting_store;
  std::vector<std::string> warnings;  // each one line, also logged
};

// The checks of the options alone, without I/O; each failure kInvalidArgument naming the value.
[[nodiscard]] Status CheckReuseOptions(const ReuseSetupOptions& options);
// The parts of it a caller with lists of its own applies to each item (the TTFT bench's codecs
// and link rates): "unknown codec 'X'", "link rate ... Gbps".
[[nodiscard]] Status CheckCodecName(const std::string& codec);
[[nodiscard]] Status CheckLinkGbps(double gbps);
// "codec 'X' needs a calibration: run `kvcodec calibrate --model M` or pass --calibration": a
// codec that needs one was asked for by name for a model without one.
[[nodiscard]] Status NeedsCalibration(const std::string& codec, const std::string& model_path);

// CheckReuseOptions, then the model loaded (and options.check_model), its calibration, the floor,
// the plan and the store.
[[nodiscard]] Result<ReuseSetup> SetUpReuse(const ReuseSetupOptions& options);

// For a caller that holds the model, its calibrations and its store already (the C API):
// CheckReuseOptions (options.model_path unused: the model's own path), then the floor and plan.
[[nodiscard]] Result<ReusePlan> PlanReuse(const LlamaModel& model, const CalibrationRegistry& calibrations,
                                          const ReuseSetupOptions& options);

}  // namespace kvc
