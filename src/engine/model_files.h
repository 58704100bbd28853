// The files that travel with a model: texts beside it (eval.txt, calib.txt) and its KVTC
// calibration (<model>.kvcal), which the evaluator, the calibrator and the benchmark all find
// the same way.
#pragma once

#include <string>

#include "base/status.h"
#include "kvtc/calibration_registry.h"

namespace kvc {

Result<std::string> ReadTextFile(const std::string& path);

// `explicit_path` if given, else `name` in the model's folder.
std::string BesideModel(const std::string& model_path, const std::string& name, const std::string& explicit_path);

// Loads `explicit_path`, or else <model>.kvcal when it exists (nothing when it does not).
Status LoadModelCalibration(CalibrationRegistry& registry, const std::string& model_path,
                            const std::string& explicit_path);

}  // namespace kvc
