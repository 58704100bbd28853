// Pre-tokenised documents (`--token-file`): one document per line, its token ids in decimal
// separated by spaces or tabs; blank lines are skipped. Users evaluate and calibrate on sets
// they tokenised themselves, so the ids are checked against the model's vocabulary here rather
// than trusted. The input is hostile: every failure is one line naming the line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

inline constexpr uint64_t kMaxTokenFileBytes = uint64_t{1} << 30;

// kInvalidArgument for a character that is not a digit or a separator, a number with more than
// 10 digits, an id >= n_vocab, or no document at all.
[[nodiscard]] Result<std::vector<std::vector<int32_t>>> ParseTokenDocuments(std::string_view text, uint32_t n_vocab);

// Reads `path` (a regular file of at most kMaxTokenFileBytes) and parses it; errors name the path.
[[nodiscard]] Result<std::vector<std::vector<int32_t>>> ReadTokenFile(const std::string& path, uint32_t n_vocab);

}  // namespace kvc
