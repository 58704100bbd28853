#include "llama/model_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvc {

Result<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) return NotFound("cannot read " + path + ": " + ec.message());
  if (!std::filesystem::is_regular_file(status)) return InvalidArgument(path + " is not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return NotFound("cannot read " + path + ": " + ec.message());
  if (size > max_bytes) {
    return InvalidArgument(FormatMessage("%s is %llu bytes, more than %llu", path.c_str(),
                                         static_cast<unsigned long long>(size),
                                         static_cast<unsigned long long>(max_bytes)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<size_t>(in.gcount()));  // shrank meanwhile: what is there
  return text;
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

Result<PrefilledText> PrefillModelText(const std::string& model_path, const std::string& text_path, uint32_t ctx) {
  ASSIGN_OR_RETURN(auto model, LlamaModel::Load(model_path));
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(BesideModel(model_path, "eval.txt", text_path)));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, model->Tokenize(text, true));
  if (tokens.size() < ctx) {
    return InvalidArgument(FormatMessage("text has %zu tokens, fewer than --ctx %u", tokens.size(), ctx));
  }
  tokens.resize(ctx);
  SessionOptions so;
  so.n_ctx = ctx + 8;
  ASSIGN_OR_RETURN(auto session, LlamaSession::Create(*model, so));
  RETURN_IF_ERROR(session->Eval(tokens, false));
  ASSIGN_OR_RETURN(KvCache kv, session->ExtractKv());
  return PrefilledText{std::move(model), std::move(kv)};
}

}  // namespace kvc
