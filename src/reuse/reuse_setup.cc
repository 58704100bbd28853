#include "reuse/reuse_setup.h"

#include <algorithm>
#include <cmath>

#include "base/log.h"
#include "base/utf8.h"
#include "codecs/codec.h"
#include "reuse/prefix_reuse.h"

namespace kvc {
namespace {

// A level is checked against the codec's ladder, except for a codec whose levels come from its
// calibration (kvtc: the ratios it was fitted at), which checks them itself when it encodes.
Status CheckLevels(const Codec& codec, const std::vector<std::string>& levels) {
  const CodecInfo& info = codec.info();
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::string& level = levels[i];
    if (level.empty()) return InvalidArgument("codec '" + info.name + "': a level is empty");
    if (std::find(levels.begin(), levels.begin() + static_cast<ptrdiff_t>(i), level) !=
        levels.begin() + static_cast<ptrdiff_t>(i)) {
      return InvalidArgument("codec '" + info.name + "': level '" + level + "' is asked for twice");
    }
    if (info.needs_calibration) continue;
    if (std::find(info.levels.begin(), info.levels.end(), level) == info.levels.end()) {
      std::string ladder;
      for (const std::string& l : info.levels) ladder += (ladder.empty() ? "" : ", ") + l;
      return InvalidArgument("codec '" + info.name + "' has no level '" + level + "' (its levels: " + ladder + ")");
    }
  }
  return Status::Ok();
}

// The floor and the plan, for options already checked.
Result<ReusePlan> DecidePlan(const LlamaModel& model, const CalibrationRegistry& calibrations,
                             const ReuseSetupOptions& o) {
  ReusePlan plan;
  if (!o.decide_floor) return plan;
  // Levels named of a codec that needs a calibration are encoded as named: without one, nothing
  // could be. Without levels the floor leaves such a codec's rungs out (and its note says why).
  if (!o.codec.empty() && !o.levels.empty() && FindCodec(o.codec)->info().needs_calibration &&
      calibrations.FindForModel(model.fingerprint()) == nullptr) {
    return NeedsCalibration(o.codec, model.path());
  }
  ASSIGN_OR_RETURN(plan.floor, LoadQualityFloor(model.path(), o.profile, model.fingerprint(), calibrations, o.quality));
  if (o.codec.empty()) return plan;
  if (!o.levels.empty()) {  // the caller's own choice, exactly
    const Codec* codec = FindCodec(o.codec);
    for (const std::string& level : o.levels) plan.rungs.push_back({codec, level});
    return plan;
  }
  ASSIGN_OR_RETURN(StorePlan stored, PlanStoredRungs(plan.floor, o.codec));
  if (!stored.note.empty()) KVC_LOG_WARN("%s", PrintableOneLine(stored.note).c_str());
  plan.rungs = std::move(stored.rungs);
  return plan;
}

Status OpenStoreOf(const ReuseSetupOptions& o, ReuseSetup& s) {
  const std::string url = o.store_url.empty() ? DefaultStoreUrl() : o.store_url;
  s.store_url = RedactedUrl(url);
  const StoreOptions store_options{.secret = o.store_secret};
  switch (o.store) {
    case StoreOpening::kNone:
      return Status::Ok();
    case StoreOpening::kReconnecting: {
      // Only a malformed URL is an error here: a store that is down is retried.
      ASSIGN_OR_RETURN(s.reconnecting_store, ReconnectingStore::Open(url, store_options, o.reconnect));
      return Status::Ok();
    }
    case StoreOpening::kOnce: {
      auto opened = OpenStore(url, store_options);
      if (opened.ok()) {
        s.store = std::move(opened).value();
        return Status::Ok();
      }
      // A malformed URL is the caller's mistake; a store that cannot be reached is a warning.
      if (opened.status().code() == StatusCode::kInvalidArgument) return opened.status();
      std::string warning =
          "store " + s.store_url + " unavailable, recomputing and not storing: " + opened.status().ToString();
      KVC_LOG_WARN("%s", PrintableOneLine(warning).c_str());
      s.warnings.push_back(std::move(warning));
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckCodecName(const std::string& codec) {
  if (FindCodec(codec) == nullptr) return InvalidArgument("unknown codec '" + codec + "'");
  return Status::Ok();
}

Status CheckLinkGbps(double gbps) {
  // NaN fails the comparison, so it is refused too.
  if (!(gbps >= 0) || !std::isfinite(gbps)) {
    return InvalidArgument(FormatMessage("link rate %g is not a finite, non-negative number of Gbps", gbps));
  }
  return Status::Ok();
}

Status NeedsCalibration(const std::string& codec, const std::string& model_path) {
  return InvalidArgument("codec '" + codec + "' needs a calibration: run `kvcodec calibrate --model " + model_path +
                         "` or pass --calibration");
}

Status CheckReuseOptions(const ReuseSetupOptions& o) {
  if (!o.codec.empty()) {
    RETURN_IF_ERROR(CheckCodecName(o.codec));
    RETURN_IF_ERROR(CheckLevels(*FindCodec(o.codec), o.levels));
  } else if (!o.levels.empty()) {
    return InvalidArgument("levels need a codec to be levels of");
  }
  if (o.chunk_tokens == 0) return InvalidArgument("chunk tokens must be positive");
  if (o.chunk_tokens > kMaxTokens) {
    return InvalidArgument(FormatMessage("chunk tokens must be at most %u", static_cast<unsigned>(kMaxTokens)));
  }
  RETURN_IF_ERROR(CheckLinkGbps(o.link_gbps));
  if (o.fetch_threads < o.min_fetch_threads || o.fetch_threads > kMaxFetchThreads) {
    return InvalidArgument(FormatMessage("fetch threads must be in %d..%d", o.min_fetch_threads, kMaxFetchThreads));
  }
  return CheckQualityLimits(o.quality);
}

Result<ReuseSetup> SetUpReuse(const ReuseSetupOptions& o) {
  RETURN_IF_ERROR(CheckReuseOptions(o));
  ReuseSetup s;
  ASSIGN_OR_RETURN(s.model, LlamaModel::Load(o.model_path));
  // What the model cannot do is said before anything else (the store, the probe) is touched.
  if (o.require_kv) RETURN_IF_ERROR(s.model->CheckKeepsKv());
  if (o.check_model) RETURN_IF_ERROR(o.check_model(*s.model));
  s.calibrations = std::make_unique<CalibrationRegistry>();
  RETURN_IF_ERROR(LoadModelCalibration(*s.calibrations, o.model_path, o.calibration));
  ASSIGN_OR_RETURN(s.plan, DecidePlan(*s.model, *s.calibrations, o));
  RETURN_IF_ERROR(OpenStoreOf(o, s));
  return s;
}

Result<ReusePlan> PlanReuse(const LlamaModel& model, const CalibrationRegistry& calibrations,
                            const ReuseSetupOptions& o) {
  RETURN_IF_ERROR(CheckReuseOptions(o));
  return DecidePlan(model, calibrations, o);
}

}  // namespace kvc
