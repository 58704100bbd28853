// Reports (eval, calibrate, the benchmarks, run) are written as JSON one way: their fields in the
// order listed, each key named as its member, and any invalid UTF-8 (a model path, generated text)
// replaced rather than thrown on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvc {

using ReportJson = nlohmann::ordered_json;

// Defines to_json for a report struct; expand it in the struct's own namespace so that
// nlohmann finds it (also for vectors of the struct):
//   KVC_REPORT_JSON(EvalReport, codec, level, ppl_delta_pct)
// nlohmann 3.11.2's NLOHMANN_DEFINE_TYPE_* write only the unordered json type, so this spells
// out the same expansion for the ordered one.
#define KVC_REPORT_JSON(Type, ...)                                                       \
  inline void to_json(::kvc::ReportJson& nlohmann_json_j, const Type& nlohmann_json_t) { \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__))             \
  }

inline std::string DumpReport(const ReportJson& j) {
  return j.dump(2, ' ', false, ReportJson::error_handler_t::replace);
}

}  // namespace kvc
