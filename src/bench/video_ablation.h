// The video codec's layout ablation (issue: what each step of the KVCodec layout earns) on a
// real model's KV: 8-bit codes alone, then general-purpose lossless coders on those codes, then
// each video layout step with each lossless video coder; and per layer, how much neighbouring
// tokens resemble each other (the redundancy inter-frame prediction can find).
#pragma once

#include <string>

#include "base/status.h"

namespace kvc {

struct VideoAblationOptions {
  std::string model_path;
  std::string text_path;          // empty: eval.txt beside the model
  uint32_t ctx = 1024;            // tokens prefilled
  uint32_t chunk = 256;           // tokens per encoded chunk
  double min_seconds = 0.3;       // per decode-speed measurement
  std::string preset = "medium";  // x265/x264 preset
  bool progress = true;
};

// The report as JSON (format: docs/results.md renders it; keys are stable).
Result<std::string> RunVideoAblationJson(const VideoAblationOptions& options);

}  // namespace kvc
