#include "transform_coding/calibration_registry.h"

#include <filesystem>

#include "transform_coding/kvcal.h"

namespace kvc {

Result<std::shared_ptr<const LoadedCalibration>> CalibrationRegistry::Load(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_)
      if (e->path == path) return e;
  }
  Hash128 hash{};
  ASSIGN_OR_RETURN(KvtcCalibration calibration, LoadKvcal(path, &hash));
  auto entry = std::make_shared<LoadedCalibration>(LoadedCalibration{std::move(calibration), hash, path});
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(entry);
  return std::shared_ptr<const LoadedCalibration>(entry);
}

Result<std::shared_ptr<const LoadedCalibration>> CalibrationRegistry::Add(KvtcCalibration calibration,
                                                                          std::string path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, WriteKvcal(calibration));
  auto entry =
      std::make_shared<LoadedCalibration>(LoadedCalibration{std::move(calibration), KvcalHash(bytes), std::move(path)});
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(entry);
  return std::shared_ptr<const LoadedCalibration>(entry);
}

std::shared_ptr<const LoadedCalibration> CalibrationRegistry::FindByHash(const Hash128& hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_)
    if (e->hash == hash) return e;
  return nullptr;
}

std::shared_ptr<const LoadedCalibration> CalibrationRegistry::FindForModel(const ModelFingerprint& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if ((*it)->calibration.model_fingerprint == model) return *it;
  return nullptr;
}

std::shared_ptr<const LoadedCalibration> CalibrationRegistry::FindForModel(const ModelFingerprint& model,
                                                                           const KvShape& shape) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      const KvtcCalibration& c = (*it)->calibration;
      if (c.model_fingerprint == model && c.n_layers == shape.n_layers && c.n_kv_heads == shape.n_kv_heads &&
          c.head_dim == shape.head_dim && c.keys_only == shape.keys_only) {
        return *it;
      }
    }
  }
  return FindForModel(model);
}

Status LoadModelCalibration(CalibrationRegistry& registry, const std::string& model_path,
                            const std::string& explicit_path) {
  std::string path = explicit_path;
  if (path.empty()) {
    const std::string beside = std::filesystem::path(model_path).replace_extension(".kvcal").string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(beside, ec)) return Status::Ok();
    path = beside;
  }
  return registry.Load(path).status();
}

}  // namespace kvc
