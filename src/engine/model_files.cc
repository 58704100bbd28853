#include "engine/model_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvc {

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string BesideModel(const std::string& model_path, const std::string& name, const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  return (std::filesystem::path(model_path).parent_path() / name).string();
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
