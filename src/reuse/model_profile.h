// A model's quality profile: every rung of every codec measured through the model itself on
// held-back calibration text (teacher-forced perplexity change, top-1 agreement, KL, ratio, as
// `kvcodec eval` measures them, in the first tokens after restored prefixes of several lengths,
// with confidence bounds), written beside the model as <model>.kvprof.json by
// `kvcodec profile` (and by `kvcodec calibrate`). It is what makes the quality floor the user's
// own: `run`, `serve` and `bench ttft` store and fetch only rungs whose measured loss on this
// model is within the limits. Format: docs/format.md, "Quality profile".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/hash.h"
#include "base/status.h"
#include "llama/llama_model.h"
#include "transform_coding/calibration_registry.h"

namespace kvc {

// Version 2: scores in windows right after the restored prefix, with bootstrap bounds; a
// version 1 profile (one 32-token score, no bound) is not read, so its rungs are not trusted.
inline constexpr uint32_t kProfileVersion = 2;
inline constexpr size_t kMaxProfileBytes = size_t{1} << 20;
inline constexpr size_t kMaxProfileRungs = 1024;
inline constexpr size_t kMaxProfileWindows = 4;
inline constexpr size_t kMaxPrefixLengths = 64;

// A rung's scores on the first `tokens` positions after every restored prefix, over every
// document and prefix length, with one-sided bounds at the profile's confidence (bootstrap over
// documents): the floor is decided on the bounds, so a rung is allowed only where the evidence
// says it is within the limits, not where it happened to look so.
struct WindowScore {
  uint32_t tokens = 0;
  uint32_t positions = 0;           // scored positions: documents x prefix lengths x tokens
  double ppl_delta_pct = 0;         // teacher-forced perplexity change, percent
  double ppl_delta_pct_bound = 0;   // upper bound
  double top1_agreement = 0;        // share of positions whose argmax is unchanged
  double top1_agreement_bound = 0;  // lower bound
  double kl_mean = 0;               // mean KL(base || restored) per position, nats
  double kl_mean_bound = 0;         // upper bound
};

struct ProfileRung {
  std::string codec;
  std::string level;
  double ratio = 0;                  // fp16 bytes / stored bytes
  std::vector<WindowScore> windows;  // the profile's windows, in its order
};

struct ModelProfile {
  ModelFingerprint model{};
  std::string calibration;               // hex KvcalHash the kvtc rungs were measured with; empty: none
  std::string text;                      // what it was measured on (informational)
  uint32_t docs = 0;                     // documents, each scored after every prefix length
  std::vector<uint32_t> prefix_lengths;  // restored prefix lengths, tokens (any BOS included), ascending
  std::vector<uint32_t> windows;         // scored window sizes, tokens, ascending
  uint32_t resamples = 0;                // bootstrap resamples of the documents
  double confidence = 0;                 // of each one-sided bound
  std::vector<ProfileRung> rungs;
};

// <model>.kvprof.json beside the model.
std::string DefaultProfilePath(const std::string& model_path);

// The profile as JSON text, with its checksum (xxh3-128 of the text written without it).
std::string WriteProfile(const ModelProfile& profile);
// Parses hostile text: size, structure, every field's type and range, the checksum. kCorrupt
// (one line naming what is wrong) for anything else.
[[nodiscard]] Result<ModelProfile> ParseProfile(std::string_view text);
[[nodiscard]] Status SaveProfile(const ModelProfile& profile, const std::string& path);  // atomic replace
[[nodiscard]] Result<ModelProfile> LoadProfile(const std::string& path);

// What a request may use and at what cost in quality.
struct QualityLimits {
  double max_ppl_delta = 1.0;  // percent
  double min_top1 = 0.97;
};
// Every window's bounds within the limits (a rung without windows is not).
bool WithinLimits(const ProfileRung& rung, const QualityLimits& limits);
// max_ppl_delta >= 0 and min_top1 in [0, 1] (NaN is neither); kInvalidArgument otherwise.
[[nodiscard]] Status CheckQualityLimits(const QualityLimits& limits);

struct QualityFloor {
  std::vector<std::pair<std::string, std::string>> allowed;    // (codec, level), most accurate first
  std::map<std::pair<std::string, std::string>, double> loss;  // worst kl_mean_bound of each allowed rung
  std::optional<ModelProfile> profile;                         // the profile it was decided from, if any
  std::string note;                                            // how the floor was decided, one line

  bool from_profile() const { return profile.has_value(); }
  bool Allows(const std::string& codec, const std::string& level) const;

  // The allowed levels of one codec, in the codec's ladder order.
  std::vector<std::string> Levels(const std::string& codec) const;
};

// Without a profile measured on this model: the lossless rungs only (raw fp16, and each codec
// that decodes bit for bit, such as planes, which still saves bytes on a slow link). A lossy rung's
// loss depends on the model (rotquant 3 is within +0.3% perplexity on every model of the test
// zoo and +506% on a small pretrained one with head_dim 8), so none is assumed safe on a model
// where it was not measured.
QualityFloor LosslessFloor(std::string note);
// The profile's rungs whose bounds in every window are within the limits (raw fp16 always; kvtc
// rungs only when measured with `kvcal_hash`, the calibration loaded now).
QualityFloor FloorFromProfile(const ModelProfile& profile, const QualityLimits& limits, const std::string& kvcal_hash);

// The floor for a model: the profile at `profile_path` (must exist and be this model's), or
// else the one beside the model if there is one (a stale or foreign one is skipped with a
// note), or else LosslessFloor with a note saying how to calibrate and profile the model.
[[nodiscard]] Result<QualityFloor> LoadQualityFloor(const std::string& model_path, const std::string& profile_path,
                                                    const ModelFingerprint& model,
                                                    const CalibrationRegistry& calibrations,
                                                    const QualityLimits& limits);

}  // namespace kvc
