// The JSON reports on codecs and .kvc files that the C API, the command line and the Python
// package all return, made in one place.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace kvc {

// What a .kvc file says about itself (its header and sections): `kvcodec inspect`,
// kvc_inspect_json(), kvcodec.inspect(). The header and the section table are parsed and
// checked; the payload is not decoded. keys_only: the file holds K alone (MLA, an indexer cache).
Result<std::string> InspectKvcJson(std::span<const uint8_t> bytes);

// Every codec: name, id, version, levels (best quality first), default level, parameters,
// description, whether it needs a calibration: `kvcodec codecs --json`, kvc_codecs_json(),
// kvcodec.codecs().
std::string CodecListJson();

}  // namespace kvc
