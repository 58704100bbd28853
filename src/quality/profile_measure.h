// Measuring a model's quality profile (reuse/model_profile.h holds its format and how a floor is
// decided from it): apart from the profile format because it runs the evaluator, and reuse
// must not depend on the benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "llama/llama_session.h"
#include "reuse/model_profile.h"

namespace kvc {

// Measuring a profile: every level of every codec (kvtc when a calibration is loaded) on the
// last `docs` windows of the calibration text (or token file), each of ctx + cont + 1 tokens: what
// calibrate held back of it.
struct ProfileOptions {
  std::string model_path;
  std::string text_path;  // empty: calib.txt beside the model
  // Instead of text: the token file calibrate read (quality/token_file.h), its lines one after
  // another; the only source for a model without a tokenizer.
  std::string token_path;
  std::string calibration;  // empty: <model>.kvcal beside the model, if present
  uint32_t docs = 0;        // 0: enough for 1024 scored positions, at least 8 (top-1 then moves in steps of 0.001)
  uint32_t ctx = 0;         // 0: min(1024, training context) - cont
  uint32_t cont = 0;        // 0: min(128, training context / 4)
  SessionOptions session;
  bool progress = true;
};
[[nodiscard]] Result<ModelProfile> MeasureProfile(const ProfileOptions& options);

}  // namespace kvc
