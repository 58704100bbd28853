// `kvcodec bench serve`: a load generator for the completion server. It
// replays one trace of streaming requests, Poisson arrivals from a fixed seed, against a server
// per configuration: requests that share one of a few long documents as their prefix (each with
// its own short question after it) mixed with requests that share nothing (text no request has
// sent before). Per class it reports time to first token (p50/p90/p99) and the cached-token hit
// rate; overall, throughput over the makespan. The configurations compared in one run: no reuse,
// reuse with the FIFO scheduler, reuse with the KV-fetch-aware scheduler, each a fresh in-process
// server over an empty `mem://` store and a capped emulated link; or one running server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvc {

struct ServeBenchOptions {
  std::string model_path;
  std::string text_path;    // prompts are cut from it; empty: eval.txt beside the model
  std::string calibration;  // kvtc; empty: <model>.kvcal beside the model
  std::string codec = "kvtc";
  // The emulated fetch link of the in-process servers (0: uncapped). Slow enough that a shared
  // document's fetch takes real time, fast enough that it still beats recomputing it under load:
  // on kvtiny a 3072-token document arrives in about 0.7 s (kvtc) where prefilling it takes about
  // 1 s alone on one core and 1.5 s under this load. This is the regime where the scheduler
  // matters: a request that waits behind such a fetch (FIFO) loses more than a prefill step.
  double link_gbps = 0.003;
  // false: the servers fetch every stored chunk, whatever the planner would predict from this
  // machine's prefill speed (measured at start-up, so it moves with whatever else the machine
  // runs): the comparison is of scheduling, with the fetches it schedules always there.
  bool plan_recompute = false;
  // Requests per second (Poisson arrivals). 0.75 keeps a 2-core machine serving kvtiny without
  // reuse below saturation, so the baseline is a queue that drains, and its TTFTs are not just
  // a measure of the backlog.
  double rate = 0.75;
  uint32_t requests = 60;        // per configuration (30 per class: p90 is the 27th of each)
  double shared_fraction = 0.5;  // of the requests, how many share a long prefix
  uint32_t prefixes = 4;         // distinct shared documents
  uint32_t prefix_tokens = 3072;
  uint32_t suffix_tokens = 24;  // each shared-prefix request's own question after the prefix
  // No-prefix prompts are 0.8x to 1.2x this long (drawn from the seed): under one chunk, so
  // there is never anything to reuse for them.
  uint32_t unique_tokens = 160;
  uint32_t max_tokens = 16;
  // The servers' sequences decoded together. 8 rather than the server's default 4: with 4, the
  // no-reuse baseline's sequences fill with long prefills and short requests queue for one.
  int parallel = 8;
  int fetch_threads = 1;
  // llama.cpp threads of the in-process servers; 0: the cores the fetch threads leave (at least
  // one), so that decoding fetched chunks never preempts one of llama.cpp's threads, which wait
  // for each other at every step (a preempted one stalls the whole batch).
  int threads = 0;
  // Any of "none" (no reuse), "fifo", "kv-aware" (reuse with that scheduler), in this order.
  std::vector<std::string> configs = {"none", "fifo", "kv-aware"};
  std::string url;  // non-empty: instead, one configuration "external" against http://host:port
  uint64_t seed = 1;
  bool progress = true;
};

// One request of the trace.
struct ServeTraceRequest {
  double arrival_s = 0;        // after the start of the replay
  bool shared = false;         // starts with one of the shared documents
  uint32_t prefix = 0;         // which one (shared requests)
  uint32_t unique_tokens = 0;  // prompt length (no-prefix requests)
};

// The trace: `requests` arrivals of a Poisson process at `rate`, exactly
// round(requests x shared_fraction) of them shared (in shuffled order), each shared one on a
// uniformly drawn prefix. Deterministic for a seed.
std::vector<ServeTraceRequest> MakeServeTrace(const ServeBenchOptions& options);

// The p-th percentile (0 < p <= 100) by the nearest-rank method: the smallest value with at
// least p% of the values at or below it, always one of the values (no interpolation). 0 for
// no values.
double PercentileNearestRank(std::vector<double> values, double p);

// JSON (keys documented in docs/results.md's serving section, plotted by scripts/plot_serve.py).
Result<std::string> RunServeBenchJson(const ServeBenchOptions& options);

}  // namespace kvc
