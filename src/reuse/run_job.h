// The main job (`kvcodec run`): a prompt's longest stored prefix is found with one batched
// lookup, fetched, decoded and restored into llama.cpp through the bandwidth-adaptive fetcher,
// the rest of the prompt is prefilled, tokens are generated, and the prompt's chunks from the
// first one not restored on (new, missing or damaged) are encoded at every level of the chosen
// codec and stored for the next request. Reports the
// time to first token and its parts.
//
// The store is a cache, never a reason to lose an answer: a store that cannot be opened or read
// means the prompt is recomputed, one that cannot be written means the chunks are not kept; both
// are warnings in the report, and the generated text is returned either way.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "llama/token_sampler.h"
#include "reuse/model_profile.h"

namespace kvc {

struct RunOptions {
  std::string model_path;
  std::string prompt;  // text; the model's BOS is prepended where its tokenizer adds one
  // Token ids to prefill instead of `prompt`, as given (no BOS added): the only prompt a model
  // without a tokenizer takes. Each must be in the model's vocabulary.
  std::vector<int32_t> prompt_tokens;
  std::string store_url;       // empty: DefaultStoreUrl()
  std::string store_secret;    // non-empty: objects sealed and checked with HMAC-SHA256 (StoreOptions)
  std::string codec = "kvtc";  // how new chunks are stored
  std::vector<std::string>
      levels;  // exactly these; empty: raw and the codec's levels within the quality floor (PlanStoredRungs)
  std::string calibration;  // kvtc; empty: <model>.kvcal beside the model
  double link_gbps = 0;     // in-process link cap for fetches; 0: none
  uint32_t chunk_tokens = 256;
  uint32_t n_generate = 32;
  bool store_new_chunks = true;
  bool reuse = true;  // false: ignore the store (recompute everything)
  // The level planner may prefill a stored chunk instead of fetching it where that is predicted
  // faster (from a prefill measured at start); false: every stored chunk is fetched.
  bool plan_recompute = true;
  int threads = 0;  // llama.cpp threads; 0: all cores
  // The pool fetched chunks decode on and new chunks encode on; 0: one per core. llama.cpp
  // keeps every core: its prefill starts only after the last chunk is in.
  int fetch_threads = 0;
  std::string profile;      // quality profile; empty: <model>.kvprof.json beside the model, if any
  QualityLimits quality;    // which profiled rungs may be stored and fetched
  SamplingParams sampling;  // default: greedy
};

struct RunReport {
  std::string text;                    // generated
  std::vector<int32_t> generated_ids;  // the generated tokens (what `text` spells, if the model has a tokenizer)
  uint32_t prompt_tokens = 0, reused_tokens = 0, prefilled_tokens = 0, generated_tokens = 0;
  uint32_t chunks_reusable = 0;       // whole chunks before the prompt's last token
  uint32_t chunks_found = 0;          // of those, with a manifest in the store
  uint32_t chunks_fetched = 0;        // restored from the store
  uint32_t tail_tokens = 0;           // restored from a stored tail after them
  std::string fallback;               // why reuse stopped before chunks_found, if it did
  bool damaged = false;               // it stopped at a damaged chunk (PrefixRestore::damaged)
  std::vector<std::string> variants;  // "codec/level" per fetched chunk
  uint64_t bytes_fetched = 0;
  double load_s = 0, lookup_s = 0, fetch_s = 0, decode_s = 0, restore_s = 0, prefill_s = 0, ttft_s = 0;
  double generate_s = 0, store_s = 0;
  uint64_t peak_rss_bytes = 0;  // the process's peak resident memory when the job ended
  uint32_t chunks_stored = 0;
  uint32_t tail_tokens_stored = 0;  // stored as a tail after them (0: none, or the store had it)
  uint64_t bytes_stored = 0;
  // llama.cpp's own state of the prompt (what its slot save writes), beside which bytes_stored
  // (every chunk, every rung, snapshots) and bytes_fetched (one prefix) are measured.
  uint64_t llama_state_bytes = 0;
  std::string store, codec;                // the store's URL without any password
  std::vector<std::string> warnings;       // the store's failures, each one line (the text was still generated)
  std::string quality_floor;               // how the rungs allowed for this model were decided
  std::vector<std::string> stored_levels;  // "codec/level" of every rung new chunks are stored at
  double link_gbps = 0;
};

// The options are checked first, once: the sampling settings here, the rest by the reuse set-up
// (reuse/reuse_setup.h), before the model loads; then the prompt, before the store is opened.
Result<RunReport> RunJob(const RunOptions& options);
std::string RunReportJson(const RunReport& report);

}  // namespace kvc
