// What a .kvc file says about itself (its header and sections), as the JSON that `kvcodec
// inspect`, kvc_inspect_json() and the Python package's inspect() all return. The header and
// the section table are parsed and checked; the payload is not decoded.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace kvc {

Result<std::string> InspectKvcJson(std::span<const uint8_t> bytes);

}  // namespace kvc
