// Replacing a file so that readers see the old contents or the new, never part of either.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace kvc {

// Writes `bytes` to a temporary file beside `path` (PATH.tmp.PID.N, created exclusively), syncs
// it and renames it over `path`. kIoError naming the step and the file on any failure, after
// which the temporary file is gone and `path` is as it was.
[[nodiscard]] Status ReplaceFileAtomically(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace kvc
