// rotquant's optional parts measured on a real model's KV, so that each is in the format only if
// it earns its bytes or its time (issue 18): entropy coding of the codes and scale bytes (size,
// and decode speed beside the plain decoder in the same run), a residual sign bit per value
// against simply one more bit, a QJL-style 1-bit residual sketch (TurboQuant's inner-product
// variant) against the plain quantiser of the same bits, and keys rotated with RoPE undone.
#pragma once

#include <string>

#include "base/status.h"

namespace kvc {

struct RotQuantAblationOptions {
  std::string model_path;
  std::string text_path;     // empty: eval.txt beside the model
  uint32_t ctx = 1024;       // tokens prefilled
  uint32_t chunk = 256;      // tokens per coded chunk
  double min_seconds = 0.3;  // per decode-speed measurement
  bool progress = true;
};

// The report as JSON (docs/results.md renders it; keys are stable).
Result<std::string> RunRotQuantAblationJson(const RotQuantAblationOptions& options);

}  // namespace kvc
