// `kvcodec bench ttft`: time to first token of a long prompt whose prefix is stored, for every
// codec at link rates from 0.01 to 10 Gbps (the link emulated in process) and prefix lengths
// (1K-32K tokens), against recomputing the prompt; each run beside its own bound (stored bytes /
// link rate + one chunk's decode + suffix prefill) and with the peak memory it took. And a projection of the same
// trade-off to 7B-70B model shapes from the ratios and decode speeds measured here, labelled as a projection with its
// assumptions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "reuse/model_profile.h"

namespace kvc {

struct TtftBenchOptions {
  std::string model_path;
  std::string text_path;          // empty: eval.txt beside the model
  std::string calibration;        // kvtc; empty: <model>.kvcal beside the model
  uint32_t prompt_tokens = 4096;  // with prefix_tokens empty: one prefix of prompt_tokens - chunk_tokens
  // Stored prefix lengths measured (whole chunks), each with a suffix of one chunk prefilled.
  // The text is repeated when it is shorter: positions past the model's training context time
  // the same.
  std::vector<uint32_t> prefix_tokens;
  uint32_t chunk_tokens = 256;
  int fetch_threads = 0;  // the fetch pool's workers; 0: one per core
  std::vector<double> link_gbps = {0.01, 0.03, 0.1, 0.3, 1, 3, 10};
  std::vector<std::string> codecs;  // empty: every codec (those needing a calibration only with one)
  uint32_t repeats = 3;             // runs per point; the median is reported
  int threads = 0;
  bool progress = true;
  std::string profile;    // quality profile; empty: <model>.kvprof.json beside the model, if any
  QualityLimits quality;  // only rungs within it are stored and fetched
};

// JSON (keys documented in docs/results.md's TTFT section, rendered by scripts/plot_ttft.py).
Result<std::string> RunTtftBenchJson(const TtftBenchOptions& options);

}  // namespace kvc
