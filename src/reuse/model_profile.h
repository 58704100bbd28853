// A model's quality profile: every rung of every codec measured through the model itself on
// held-back calibration text (teacher-forced perplexity change, top-1 agreement, KL, ratio, as
// `kvcodec eval` measures them), written beside the model as <model>.kvprof.json by
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

inline constexpr uint32_t kProfileVersion = 1;
inline constexpr size_t kMaxProfileBytes = size_t{1} << 20;
inline constexpr size_t kMaxProfileRungs = 1024;

struct ProfileRung {
  std::string codec;
  std::string level;
  double ratio = 0;           // fp16 bytes / stored bytes
  double ppl_delta_pct = 0;   // teacher-forced perplexity change, percent
  double top1_agreement = 0;  // share of continuation positions whose argmax is unchanged
  double kl_mean = 0;         // mean KL(base || restored) per position, nats
};

struct ModelProfile {
  ModelFingerprint model{};
  std::string calibration;  // hex KvcalHash the kvtc rungs were measured with; empty: none
  std::string text;         // what it was measured on (informational)
  uint32_t docs = 0, ctx = 0, cont = 0;
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
// max_ppl_delta >= 0 and min_top1 in [0, 1] (NaN is neither); kInvalidArgument otherwise.
[[nodiscard]] Status CheckQualityLimits(const QualityLimits& limits);

struct QualityFloor {
  std::vector<std::pair<std::string, std::string>> allowed;    // (codec, level), most accurate first
  std::map<std::pair<std::string, std::string>, double> loss;  // kl_mean of each allowed rung
  std::optional<ModelProfile> profile;                         // the profile it was decided from, if any
  std::string note;                                            // how the floor was decided, one line

  bool from_profile() const { return profile.has_value(); }
  bool Allows(const std::string& codec, const std::string& level) const;

  // The allowed levels of one codec, in the codec's ladder order.
  std::vector<std::string> Levels(const std::string& codec) const;
};

// Without a profile measured on this model: the lossless rungs only (raw fp16). A lossy rung's
// loss depends on the model (rotquant 3 is within +0.3% perplexity on every model of the test
// zoo and +506% on a small pretrained one with head_dim 8), so none is assumed safe on a model
// where it was not measured.
QualityFloor LosslessFloor(std::string note);
// The profile's rungs within the limits (raw fp16 always; kvtc rungs only when measured with
// `kvcal_hash`, the calibration loaded now).
QualityFloor FloorFromProfile(const ModelProfile& profile, const QualityLimits& limits, const std::string& kvcal_hash);

// The floor for a model: the profile at `profile_path` (must exist and be this model's), or
// else the one beside the model if there is one (a stale or foreign one is skipped with a
// note), or else LosslessFloor with a note saying how to calibrate and profile the model.
[[nodiscard]] Result<QualityFloor> LoadQualityFloor(const std::string& model_path, const std::string& profile_path,
                                                    const ModelFingerprint& model,
                                                    const CalibrationRegistry& calibrations,
                                                    const QualityLimits& limits);

}  // namespace kvc
