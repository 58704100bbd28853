// The calibrations a process has loaded, found by file hash (how a .kvc names the one it was
// encoded with) or by model. Thread-safe; entries are immutable once added.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/hash.h"
#include "base/status.h"
#include "transform_coding/calibration.h"

namespace kvc {

struct LoadedCalibration {
  KvtcCalibration calibration;
  Hash128 hash{};  // xxh3-128 of the .kvcal bytes
  std::string path;
};

class CalibrationRegistry {
 public:
  // Loads a .kvcal file, or returns the entry already loaded from the same path.
  Result<std::shared_ptr<const LoadedCalibration>> Load(const std::string& path);
  // Adds an in-memory calibration (tests, `kvcodec calibrate`); its hash is that of its bytes.
  Result<std::shared_ptr<const LoadedCalibration>> Add(KvtcCalibration calibration, std::string path = "");

  std::shared_ptr<const LoadedCalibration> FindByHash(const Hash128& hash) const;
  // The most recently added calibration for the model.
  std::shared_ptr<const LoadedCalibration> FindForModel(const ModelFingerprint& model) const;
  // The most recently added one for the model whose geometry and kinds fit `shape` (its token
  // count aside): a model may keep caches of several shapes (an MLA cache and its indexer's,
  // both keys only), each with its calibration. Without one that fits, FindForModel's, so that
  // the caller reports the mismatch.
  std::shared_ptr<const LoadedCalibration> FindForModel(const ModelFingerprint& model, const KvShape& shape) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const LoadedCalibration>> entries_;
};

// Loads `explicit_path` into `registry`, or else <model>.kvcal beside the model when it exists
// (nothing when it does not): how every command finds a model's calibration.
Status LoadModelCalibration(CalibrationRegistry& registry, const std::string& model_path,
                            const std::string& explicit_path);

}  // namespace kvc
