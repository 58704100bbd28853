#include "llama/model_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file_io.h"
#include "llama/llama_session.h"

namespace kvc {

Result<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes) { return ReadFileText(path, max_bytes); }

std::string BesideModel(const std::string& model_path, const std::string& name, const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  return (std::filesystem::path(model_path).parent_path() / name).string();
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
