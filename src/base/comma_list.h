// Comma-separated lists as users type them ("raw,quant", "coder=x265,preset=fast"): one parser
// for the command line and the C API, so both accept and refuse the same text.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

// "a,b,,c" -> {"a", "b", "c"}: empty items are dropped.
std::vector<std::string> SplitCommaList(std::string_view list);

// Adds each "key=value" item of `list` to `out` (a later key wins; the value may be empty).
// kInvalidArgument "<what> 'item' is not key=value" for an item without a key or an '='.
[[nodiscard]] Status ParseKeyValues(std::string_view list, std::string_view what,
                                    std::map<std::string, std::string>* out);

}  // namespace kvc
