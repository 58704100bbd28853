#include "reuse/model_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "base/hex.h"
#include "base/utf8.h"
#include "codecs/codec.h"
#include "format/container.h"
#include "llama/model_files.h"

namespace kvc {
namespace {

constexpr std::string_view kFormatName = "kvcodec-quality-profile";
using Json = nlohmann::ordered_json;

// The profile writes fingerprints in lowercase (HexString) and reads only that form.
bool ParseHex16(const std::string& s, std::array<uint8_t, 16>* out) {
  if (std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'F'; })) return false;
  return ParseHexBytes(s, *out);
}

Json Body(const ModelProfile& p) {
  Json j;
  j["format"] = kFormatName;
  j["version"] = kProfileVersion;
  j["model_fingerprint"] = HexString(p.model);
  j["calibration"] = p.calibration;
  j["text"] = p.text;
  j["docs"] = p.docs;
  j["prefix_lengths"] = p.prefix_lengths;
  j["windows"] = p.windows;
  j["resamples"] = p.resamples;
  j["confidence"] = p.confidence;
  j["rungs"] = Json::array();
  for (const ProfileRung& r : p.rungs) {
    Json windows = Json::array();
    for (const WindowScore& w : r.windows) {
      windows.push_back({{"tokens", w.tokens},
                         {"positions", w.positions},
                         {"ppl_delta_pct", w.ppl_delta_pct},
                         {"ppl_delta_pct_bound", w.ppl_delta_pct_bound},
                         {"top1_agreement", w.top1_agreement},
                         {"top1_agreement_bound", w.top1_agreement_bound},
                         {"kl_mean", w.kl_mean},
                         {"kl_mean_bound", w.kl_mean_bound}});
    }
    j["rungs"].push_back({{"codec", r.codec}, {"level", r.level}, {"ratio", r.ratio}, {"windows", std::move(windows)}});
  }
  return j;
}

std::string Checksum(const Json& body) {
  const std::string text = body.dump(2, ' ', false, Json::error_handler_t::replace);
  return HexString(Xxh3_128(text.data(), text.size()));
}

// Field readers that never throw: each checks the type first.
Status GetString(const Json& j, const char* key, size_t max_bytes, std::string* out) {
  const auto it = j.find(key);
  KVC_CHECK_CORRUPT(it != j.end() && it->is_string(), "profile: '%s' is missing or not a string", key);
  const auto& s = it->get_ref<const std::string&>();
  KVC_CHECK_CORRUPT(s.size() <= max_bytes, "profile: '%s' is longer than %zu bytes", key, max_bytes);
  *out = s;
  return Status::Ok();
}

Status GetNumber(const Json& j, const char* key, double lo, double hi, double* out) {
  const auto it = j.find(key);
  KVC_CHECK_CORRUPT(it != j.end() && it->is_number(), "profile: '%s' is missing or not a number", key);
  const double v = it->get<double>();
  KVC_CHECK_CORRUPT(std::isfinite(v) && v >= lo && v <= hi, "profile: '%s' is %g, outside [%g, %g]", key, v, lo, hi);
  *out = v;
  return Status::Ok();
}

Status GetCount(const Json& j, const char* key, uint32_t* out) {
  double v;
  RETURN_IF_ERROR(GetNumber(j, key, 0, 1 << 22, &v));
  KVC_CHECK_CORRUPT(v == std::floor(v), "profile: '%s' is not a whole number", key);
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

// A list of 1..max_size whole numbers in [1, 2^22], strictly ascending.
Status GetAscendingCounts(const Json& j, const char* key, size_t max_size, std::vector<uint32_t>* out) {
  const auto it = j.find(key);
  KVC_CHECK_CORRUPT(it != j.end() && it->is_array(), "profile: '%s' is missing or not an array", key);
  KVC_CHECK_CORRUPT(!it->empty() && it->size() <= max_size, "profile: '%s' has %zu entries, not 1..%zu", key,
                    it->size(), max_size);
  out->clear();
  for (const Json& v : *it) {
    KVC_CHECK_CORRUPT(v.is_number(), "profile: '%s' holds a value that is not a number", key);
    const double d = v.get<double>();
    KVC_CHECK_CORRUPT(std::isfinite(d) && d >= 1 && d <= (1 << 22) && d == std::floor(d),
                      "profile: '%s' holds %g, not a whole number in [1, 2^22]", key, d);
    const auto n = static_cast<uint32_t>(d);
    KVC_CHECK_CORRUPT(out->empty() || n > out->back(), "profile: '%s' is not strictly ascending", key);
    out->push_back(n);
  }
  return Status::Ok();
}

Status GetWindowScore(const Json& w, size_t rung, uint32_t tokens, WindowScore* out) {
  KVC_CHECK_CORRUPT(w.is_object() && w.size() == 8, "profile: rung %zu: a window is not an object of 8 members", rung);
  RETURN_IF_ERROR(GetCount(w, "tokens", &out->tokens));
  KVC_CHECK_CORRUPT(out->tokens == tokens, "profile: rung %zu: windows differ from the profile's 'windows'", rung);
  RETURN_IF_ERROR(GetCount(w, "positions", &out->positions));
  RETURN_IF_ERROR(GetNumber(w, "ppl_delta_pct", -100, 1e9, &out->ppl_delta_pct));
  RETURN_IF_ERROR(GetNumber(w, "ppl_delta_pct_bound", -100, 1e9, &out->ppl_delta_pct_bound));
  RETURN_IF_ERROR(GetNumber(w, "top1_agreement", 0, 1, &out->top1_agreement));
  RETURN_IF_ERROR(GetNumber(w, "top1_agreement_bound", 0, 1, &out->top1_agreement_bound));
  RETURN_IF_ERROR(GetNumber(w, "kl_mean", 0, 1e9, &out->kl_mean));
  RETURN_IF_ERROR(GetNumber(w, "kl_mean_bound", 0, 1e9, &out->kl_mean_bound));
  return Status::Ok();
}

}  // namespace

std::string DefaultProfilePath(const std::string& model_path) {
  return std::filesystem::path(model_path).replace_extension(".kvprof.json").string();
}

std::string WriteProfile(const ModelProfile& profile) {
  Json j = Body(profile);
  j["checksum"] = Checksum(j);
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Result<ModelProfile> ParseProfile(std::string_view text) {
  KVC_CHECK_CORRUPT(text.size() <= kMaxProfileBytes, "profile: %zu bytes, over %zu", text.size(), kMaxProfileBytes);
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  KVC_CHECK_CORRUPT(!j.is_discarded(), "profile: not JSON");
  KVC_CHECK_CORRUPT(j.is_object(), "profile: not a JSON object");
  std::string format, fingerprint, checksum;
  RETURN_IF_ERROR(GetString(j, "format", 64, &format));
  KVC_CHECK_CORRUPT(format == kFormatName, "profile: format is not %s", std::string(kFormatName).c_str());
  double version;
  RETURN_IF_ERROR(GetNumber(j, "version", 0, 1e9, &version));
  if (version != kProfileVersion) {
    return Unsupported(
        FormatMessage("profile: version %g not supported (this build reads %u; measure it again with `kvcodec "
                      "profile`)",
                      version, kProfileVersion));
  }
  ModelProfile p;
  RETURN_IF_ERROR(GetString(j, "model_fingerprint", 64, &fingerprint));
  KVC_CHECK_CORRUPT(ParseHex16(fingerprint, &p.model), "profile: model_fingerprint is not 32 lowercase hex digits");
  RETURN_IF_ERROR(GetString(j, "calibration", 64, &p.calibration));
  std::array<uint8_t, 16> unused;
  KVC_CHECK_CORRUPT(p.calibration.empty() || ParseHex16(p.calibration, &unused),
                    "profile: calibration is not empty or 32 lowercase hex digits");
  RETURN_IF_ERROR(GetString(j, "text", 4096, &p.text));
  KVC_CHECK_CORRUPT(IsValidUtf8(p.text), "profile: text is not valid UTF-8");
  RETURN_IF_ERROR(GetCount(j, "docs", &p.docs));
  RETURN_IF_ERROR(GetAscendingCounts(j, "prefix_lengths", kMaxPrefixLengths, &p.prefix_lengths));
  RETURN_IF_ERROR(GetAscendingCounts(j, "windows", kMaxProfileWindows, &p.windows));
  RETURN_IF_ERROR(GetCount(j, "resamples", &p.resamples));
  RETURN_IF_ERROR(GetNumber(j, "confidence", 0.5, 1, &p.confidence));
  const auto rungs = j.find("rungs");
  KVC_CHECK_CORRUPT(rungs != j.end() && rungs->is_array(), "profile: 'rungs' is missing or not an array");
  KVC_CHECK_CORRUPT(rungs->size() <= kMaxProfileRungs, "profile: %zu rungs, over %zu", rungs->size(), kMaxProfileRungs);
  for (size_t i = 0; i < rungs->size(); ++i) {
    const Json& r = (*rungs)[i];
    KVC_CHECK_CORRUPT(r.is_object() && r.size() == 4, "profile: rung %zu is not an object of 4 members", i);
    ProfileRung rung;
    RETURN_IF_ERROR(GetString(r, "codec", kMaxLevelNameBytes, &rung.codec));
    RETURN_IF_ERROR(GetString(r, "level", kMaxLevelNameBytes, &rung.level));
    // CheckName admits "" (a .kvc header's level may be empty); a rung names a level, so here
    // both names are 1..64 bytes, as docs/format.md says.
    if (rung.codec.empty() || rung.level.empty() || !CheckName(rung.codec, "codec").ok() ||
        !CheckName(rung.level, "level").ok()) {
      return Corrupt(FormatMessage("profile: rung %zu: codec or level is empty or outside [A-Za-z0-9._+-]", i));
    }
    RETURN_IF_ERROR(GetNumber(r, "ratio", 1e-6, 1e9, &rung.ratio));
    const auto windows = r.find("windows");
    KVC_CHECK_CORRUPT(windows != r.end() && windows->is_array() && windows->size() == p.windows.size(),
                      "profile: rung %zu: 'windows' is not an array of one score per window", i);
    rung.windows.resize(p.windows.size());
    for (size_t w = 0; w < p.windows.size(); ++w) {
      RETURN_IF_ERROR(GetWindowScore((*windows)[w], i, p.windows[w], &rung.windows[w]));
    }
    for (const ProfileRung& seen : p.rungs) {
      KVC_CHECK_CORRUPT(seen.codec != rung.codec || seen.level != rung.level, "profile: rung %s/%s listed twice",
                        rung.codec.c_str(), rung.level.c_str());
    }
    p.rungs.push_back(std::move(rung));
  }
  RETURN_IF_ERROR(GetString(j, "checksum", 64, &checksum));
  j.erase("checksum");
  KVC_CHECK_CORRUPT(j.size() == 11, "profile: unknown fields");
  // The checksum covers the canonical form, so it also proves nothing was reordered or added.
  KVC_CHECK_CORRUPT(Checksum(Body(p)) == checksum, "profile: checksum mismatch (edited or damaged)");
  return p;
}

Status SaveProfile(const ModelProfile& profile, const std::string& path) {
  const std::string text = WriteProfile(profile);
  return ReplaceFileAtomically(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Result<ModelProfile> LoadProfile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, kMaxProfileBytes));
  auto p = ParseProfile(text);
  if (!p.ok()) return p.status().WithContext(path);
  return p;
}

bool QualityFloor::Allows(const std::string& codec, const std::string& level) const {
  return std::find(allowed.begin(), allowed.end(), std::pair{codec, level}) != allowed.end();
}

std::vector<std::string> QualityFloor::Levels(const std::string& codec) const {
  std::vector<std::string> out;
  const Codec* c = FindCodec(codec);
  if (c == nullptr) return out;
  for (const std::string& level : c->info().levels) {
    if (Allows(codec, level)) out.push_back(level);
  }
  return out;
}

QualityFloor LosslessFloor(std::string note) {
  QualityFloor f;
  f.allowed = {{"raw", "fp16"}};
  for (const Codec* c : AllCodecs()) {
    if (c->info().lossless && c->info().name != "raw") f.allowed.emplace_back(c->info().name, c->info().default_level);
  }
  for (const auto& rung : f.allowed) f.loss[rung] = 0;
  f.note = std::move(note);
  return f;
}

bool WithinLimits(const ProfileRung& rung, const QualityLimits& limits) {
  if (rung.windows.empty()) return false;
  return std::all_of(rung.windows.begin(), rung.windows.end(), [&](const WindowScore& w) {
    return w.ppl_delta_pct_bound <= limits.max_ppl_delta && w.top1_agreement_bound >= limits.min_top1;
  });
}

QualityFloor FloorFromProfile(const ModelProfile& profile, const QualityLimits& limits, const std::string& kvcal_hash) {
  QualityFloor f;
  f.profile = profile;
  // The planner ranks rungs by loss: each rung's worst bound on KL over the windows.
  auto worst_kl = [](const ProfileRung& r) {
    double kl = 0;
    for (const WindowScore& w : r.windows) kl = std::max(kl, w.kl_mean_bound);
    return kl;
  };
  std::vector<std::pair<const ProfileRung*, double>> ok;
  for (const ProfileRung& r : profile.rungs) {
    if (r.codec == "kvtc" && (profile.calibration.empty() || profile.calibration != kvcal_hash)) continue;
    if (FindCodec(r.codec) == nullptr) continue;
    if (WithinLimits(r, limits)) ok.emplace_back(&r, worst_kl(r));
  }
  std::stable_sort(ok.begin(), ok.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  bool has_raw = false;
  for (const auto& [r, kl] : ok) {
    f.allowed.emplace_back(r->codec, r->level);
    f.loss[{r->codec, r->level}] = kl;
    has_raw = has_raw || (r->codec == "raw" && r->level == "fp16");
  }
  if (!has_raw) {  // exact by construction, whatever was measured
    f.allowed.insert(f.allowed.begin(), {"raw", "fp16"});
    f.loss[{"raw", "fp16"}] = 0;
  }
  f.note = FormatMessage(
      "%zu of %zu profiled rungs within ppl_delta_pct <= %g and top1_agreement >= %g at %g%% confidence in every "
      "window",
      ok.size(), profile.rungs.size(), limits.max_ppl_delta, limits.min_top1, 100 * profile.confidence);
  return f;
}

Status CheckQualityLimits(const QualityLimits& limits) {
  if (!(limits.max_ppl_delta >= 0) || !(limits.min_top1 >= 0 && limits.min_top1 <= 1)) {
    return InvalidArgument("--max-ppl-delta must be >= 0 and --min-top1 in [0, 1]");
  }
  return Status::Ok();
}

Result<QualityFloor> LoadQualityFloor(const std::string& model_path, const std::string& profile_path,
                                      const ModelFingerprint& model, const CalibrationRegistry& calibrations,
                                      const QualityLimits& limits) {
  RETURN_IF_ERROR(CheckQualityLimits(limits));
  const auto loaded_kvcal = calibrations.FindForModel(model);
  const std::string kvcal_hash = loaded_kvcal ? HexString(loaded_kvcal->hash) : "";
  // `calibrate` writes the calibration kvtc needs and measures every codec's rungs into the
  // profile; `profile` alone re-measures them.
  const std::string how = "to store compressed chunks, run `kvcodec calibrate --model " + model_path +
                          " --text TEXT` on text like your prompts (it writes a calibration and a quality profile "
                          "measured on this model)";
  constexpr const char* kLosslessOnly = "only lossless rungs (raw fp16, planes) are stored and fetched";
  if (!profile_path.empty()) {
    ASSIGN_OR_RETURN(ModelProfile p, LoadProfile(profile_path));
    if (p.model != model) return InvalidArgument(profile_path + " is the profile of another model");
    return FloorFromProfile(p, limits, kvcal_hash);
  }
  const std::string beside = DefaultProfilePath(model_path);
  std::error_code ec;
  if (!std::filesystem::exists(beside, ec)) {
    return LosslessFloor(FormatMessage("no quality profile for this model: %s; %s", kLosslessOnly, how.c_str()));
  }
  auto p = LoadProfile(beside);
  if (!p.ok()) {
    return LosslessFloor(FormatMessage("quality profile unusable (%s): %s; %s", p.status().ToString().c_str(),
                                       kLosslessOnly, how.c_str()));
  }
  if (p->model != model) {
    return LosslessFloor(
        FormatMessage("%s is another model's profile: %s; %s", beside.c_str(), kLosslessOnly, how.c_str()));
  }
  QualityFloor f = FloorFromProfile(*p, limits, kvcal_hash);
  if (!p->calibration.empty() && p->calibration != kvcal_hash) {
    f.note += "; kvtc left out: the profile was measured with another calibration (" + how + ")";
  }
  return f;
}

}  // namespace kvc
