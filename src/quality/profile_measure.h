// Measuring a model's quality profile (reuse/model_profile.h holds its format and how a floor is
// decided from it): apart from the profile format because it runs the evaluator, and reuse
// must not depend on the benchmarks.
//
// Where reuse bites: a restored prefix's error shows most in the first tokens after it (the KL of
// the first 8 is 2-3x the mean over 32 on a small model), so each document is scored in the first
// 8 and 32 tokens after restored prefixes of several lengths up to the training context, on
// enough documents for kProfileMinPositions positions in the 8-token window, and every figure
// gets a bootstrap bound (quality/bootstrap_bound.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "llama/llama_model.h"
#include "llama/llama_session.h"
#include "reuse/model_profile.h"

namespace kvc {

inline constexpr std::array<uint32_t, 2> kProfileWindows = {8, 32};
inline constexpr uint32_t kProfileMinPositions = 2048;  // scored in the first (8-token) window
inline constexpr uint32_t kMaxDefaultPrefixLengths = 16;

struct ProfileOptions {
  std::string model_path;
  // The source, one of the two (nothing is read that was not named): a text, or the token file
  // calibrate read (quality/token_file.h), its lines one after another; the documents are its
  // last windows, what calibrate held back.
  std::string text_path;
  std::string token_path;
  uint32_t max_tokens = 0;  // only the source's first tokens (calibrate's --tokens); 0: all
  std::string calibration;  // empty: <model>.kvcal beside the model, if present
  uint32_t docs = 0;        // 0: enough for kProfileMinPositions in the first window
  uint32_t window = 0;      // tokens per document, any BOS included; 0: min(1024, training context)
  // Restored prefix lengths (any BOS included), ascending, each at least the largest window
  // after the one before, the last + 33 within `window`; empty: up to kMaxDefaultPrefixLengths
  // evenly spaced, the last window - 33.
  std::vector<uint32_t> prefix_lengths;
  uint32_t resamples = 2000;
  double confidence = 0.95;
  SessionOptions session;
  bool progress = true;
};

// What a profile with these options reads: `docs` windows of `window` tokens from the end of its
// source, each scored after every prefix length. kInvalidArgument for options that cannot be
// met (a prefix too long for the window, a window past the training context, ...); the source
// is not looked at.
struct ProfileGeometry {
  uint32_t window = 0;
  uint32_t docs = 0;
  std::vector<uint32_t> prefix_lengths;
  // Tokens of the source the documents take from its end (BOS not counted).
  uint64_t SourceTokens(bool has_bos) const { return uint64_t{docs} * (window - (has_bos ? 1 : 0)); }
};
[[nodiscard]] Result<ProfileGeometry> PlanProfile(const ProfileOptions& options, const ModelInfo& model);

[[nodiscard]] Result<ModelProfile> MeasureProfile(const ProfileOptions& options);

}  // namespace kvc
