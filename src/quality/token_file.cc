#include "quality/token_file.h"

#include "llama/model_files.h"

namespace kvc {

Result<std::vector<std::vector<int32_t>>> ParseTokenDocuments(std::string_view text, uint32_t n_vocab) {
  std::vector<std::vector<int32_t>> docs;
  std::vector<int32_t> doc;
  size_t line = 1, column = 1;
  uint64_t value = 0;
  int digits = 0;
  auto end_number = [&]() -> Status {
    if (digits == 0) return Status::Ok();
    if (value >= n_vocab) {
      return InvalidArgument(FormatMessage("line %zu, column %zu: token id %llu is not below the vocabulary size %u",
                                           line, column - digits, static_cast<unsigned long long>(value), n_vocab));
    }
    doc.push_back(static_cast<int32_t>(value));
    value = 0;
    digits = 0;
    return Status::Ok();
  };
  for (size_t i = 0; i < text.size(); ++i, ++column) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      if (++digits > 10) return InvalidArgument(FormatMessage("line %zu, column %zu: number too long", line, column));
      value = value * 10 + static_cast<uint64_t>(c - '0');
      continue;
    }
    RETURN_IF_ERROR(end_number());
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '\n') {
      if (!doc.empty()) docs.push_back(std::move(doc));
      doc.clear();
      ++line;
      column = 0;
      continue;
    }
    return InvalidArgument(FormatMessage("line %zu, column %zu: byte 0x%02x is not a digit, space or tab", line, column,
                                         static_cast<unsigned>(static_cast<unsigned char>(c))));
  }
  RETURN_IF_ERROR(end_number());
  if (!doc.empty()) docs.push_back(std::move(doc));
  if (docs.empty()) return InvalidArgument("no documents: every line is empty");
  return docs;
}

Result<std::vector<std::vector<int32_t>>> ReadTokenFile(const std::string& path, uint32_t n_vocab) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, kMaxTokenFileBytes));
  auto docs = ParseTokenDocuments(text, n_vocab);
  if (!docs.ok()) return docs.status().WithContext(path);
  return docs;
}

}  // namespace kvc
