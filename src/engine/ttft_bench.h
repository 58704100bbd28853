// `kvcodec bench ttft`: time to first token of a long prompt whose prefix is stored, for every
// codec at link rates from 0.01 to 10 Gbps (the link emulated in process), against recomputing
// the prompt; each run beside its own bound (stored bytes / link rate + one chunk's decode +
// suffix prefill). And a projection of the same trade-off to 7B-70B model shapes from the
// ratios and decode speeds measured here, labelled as a projection with its assumptions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "engine/model_profile.h"

namespace kvc {

struct TtftBenchOptions {
  std::string model_path;
  std::string text_path;    // empty: eval.txt beside the model
  std::string calibration;  // kvtc; empty: <model>.kvcal beside the model
  uint32_t prompt_tokens = 4096;
  uint32_t chunk_tokens = 256;
  std::vector<double> link_gbps = {0.01, 0.03, 0.1, 0.3, 1, 3, 10};
  std::vector<std::string> codecs;  // empty: every codec (those needing a calibration only with one)
  uint32_t repeats = 3;             // runs per point; the median is reported
  int threads = 0;
  bool progress = true;
  std::string profile;     // quality profile; empty: <model>.kvprof.json beside the model, if any
  QualityLimits quality;   // only rungs within it are stored and fetched
};

// JSON (keys documented in docs/results.md's TTFT section, rendered by scripts/plot_ttft.py).
Result<std::string> RunTtftBenchJson(const TtftBenchOptions& options);

}  // namespace kvc
