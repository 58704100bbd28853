// What the C API's entry points (kvcodec_c.cc) share: the per-thread error message, the guard
// that keeps exceptions from crossing the C boundary, the process-wide calibrations, and the
// conversions between C and C++ types.
// Internal: not installed.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "base/comma_list.h"
#include "base/report_json.h"
#include "base/status.h"
#include "kvcodec/kvcodec.h"
#include "llama/llama_session.h"
#include "reuse/model_profile.h"
#include "transform_coding/calibration_registry.h"

namespace kvc::capi {

inline thread_local std::string g_last_error;

// Process-wide: a .kvc file names its calibration by hash, so whoever decodes it must be able
// to find the calibration some earlier call loaded.
inline kvc::CalibrationRegistry& Calibrations() {
  static kvc::CalibrationRegistry registry;
  return registry;
}

inline kvc_status Fail(const kvc::Status& status) {
  g_last_error = status.ToString();
  switch (status.code()) {
    case kvc::StatusCode::kOk:
      return KVC_OK;
    case kvc::StatusCode::kInvalidArgument:
      return KVC_INVALID_ARGUMENT;
    case kvc::StatusCode::kCorrupt:
      return KVC_CORRUPT;
    case kvc::StatusCode::kUnsupported:
      return KVC_UNSUPPORTED;
    case kvc::StatusCode::kNotFound:
      return KVC_NOT_FOUND;
    case kvc::StatusCode::kIoError:
      return KVC_IO_ERROR;
    case kvc::StatusCode::kInternal:
      return KVC_INTERNAL;
  }
  return KVC_INTERNAL;
}

// The one guard every entry point runs in: no exception crosses the C boundary (it would end the
// caller's process); an unexpected one becomes KVC_INTERNAL with its message. Fail allocates, so
// under memory exhaustion even the message may be lost: then it is a fixed text.
template <typename Body>
kvc_status Guard(Body&& body) noexcept {
  const char* what = "unexpected exception";
  try {
    return body();
  } catch (const std::bad_alloc&) {
    what = "out of memory";
  } catch (const std::exception& e) {
    try {
      return Fail(kvc::Internal(std::string("unexpected exception: ") + e.what()));
    } catch (...) {
    }
  } catch (...) {
  }
  try {
    return Fail(kvc::Internal(what));
  } catch (...) {
    g_last_error.clear();
    return KVC_INTERNAL;
  }
}

// For the entry points with no status to return (release functions): swallow, never throw.
template <typename Body>
void GuardVoid(Body&& body) noexcept {
  try {
    body();
  } catch (...) {
  }
}

// Input buffers: an empty one may come with a NULL pointer (an empty file read into a vector).
inline bool MissingInput(const uint8_t* data, size_t size) { return data == nullptr && size > 0; }

inline kvc_status NullArgument(const char* what) { return Fail(kvc::InvalidArgument(std::string(what) + " is NULL")); }

// malloc'd copies the caller frees with kvc_free; a failed allocation is "out of memory" through
// the guard, never a NULL result reported as success.
inline char* CopyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

inline uint8_t* CopyBytes(std::span<const uint8_t> bytes) {
  uint8_t* out = static_cast<uint8_t*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
  if (out == nullptr) throw std::bad_alloc();
  if (!bytes.empty()) std::memcpy(out, bytes.data(), bytes.size());
  return out;
}

// An entry point that takes a parameter struct naming a model and returns a JSON report
// (kvc_run_json): one argument check, and the report or its error handed back one way.
template <typename Params>
kvc_status JsonTool(const Params* p, char** out_json, kvc::Result<std::string> (*run)(const Params*)) {
  return Guard([&]() -> kvc_status {
    if (p == nullptr || p->model_path == nullptr || out_json == nullptr) return NullArgument("params, model or out");
    kvc::Result<std::string> report = run(p);
    if (!report.ok()) return Fail(report.status());
    *out_json = CopyString(*report);
    return KVC_OK;
  });
}

// A C string list (NULL: empty) as base/comma_list.h splits it.
inline std::vector<std::string> SplitList(const char* list) { return kvc::SplitCommaList(list == nullptr ? "" : list); }

// "k=v,k=v" codec parameters (NULL: none), as the command line reads them.
inline kvc::Result<std::map<std::string, std::string>> ParseParams(const char* text) {
  std::map<std::string, std::string> params;
  if (text != nullptr) RETURN_IF_ERROR(kvc::ParseKeyValues(text, "codec parameter", &params));
  return params;
}

inline kvc::SessionOptions ToSessionOptions(const kvc_session_params& p) {
  kvc::SessionOptions o;
  if (p.n_ctx) o.n_ctx = p.n_ctx;
  if (p.n_batch) o.n_batch = p.n_batch;
  o.n_threads = p.n_threads;
  o.cache_type = static_cast<kvc::DType>(p.cache_type);
  o.flash_attn = p.flash_attn != 0;
  // A C API session exists to move KV in and out: a model that keeps none is refused by name.
  o.require_kv = true;
  return o;
}

inline bool ValidDType(kvc_dtype d) { return kvc::IsValidDType(static_cast<uint8_t>(d)); }

// Quality limits as every entry point takes them: a limit <= 0 (as in a zero-initialised struct)
// keeps the default, as 0 does for the other fields of the parameter structs.
inline kvc::QualityLimits ToQualityLimits(double max_ppl_delta, double min_top1) {
  kvc::QualityLimits limits;
  if (max_ppl_delta > 0) limits.max_ppl_delta = max_ppl_delta;
  if (min_top1 > 0) limits.min_top1 = min_top1;
  return limits;
}

// The quality-floor fields every request-serving params struct carries.
template <typename Params>
void SetQuality(const Params* p, std::string* profile, kvc::QualityLimits* limits) {
  if (p->profile) *profile = p->profile;
  *limits = ToQualityLimits(p->max_ppl_delta, p->min_top1);
}

// Those fields as a *_default_params() fills them: the limits SetQuality keeps when none is given.
template <typename Params>
void SetDefaultQuality(Params* p) {
  const kvc::QualityLimits defaults;
  p->max_ppl_delta = defaults.max_ppl_delta;
  p->min_top1 = defaults.min_top1;
}

}  // namespace kvc::capi
