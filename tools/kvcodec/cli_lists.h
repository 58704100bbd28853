// The command line's list options ("a,b,c") parsed, at the edge, into the types the library's
// option structs take. Only the syntax is checked here: what the values may be (a codec that
// exists, a link rate above 0, prefixes of whole chunks) is the library's to say, once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvcodec_cli {

// --param values (each "key=value" or "k=v,k=v") as EncodeOptions::params; a later key wins.
// kInvalidArgument for an item that is not key=value.
kvc::Result<std::map<std::string, std::string>> ParseCodecParams(const std::vector<std::string>& params);

// "0.01,0.1,10": numbers of Gbps. kInvalidArgument for an item that is not a number.
kvc::Result<std::vector<double>> ParseLinkRates(std::string_view list);

// "1024,4096": token counts (decimal digits, at most 2^32 - 1). kInvalidArgument otherwise.
kvc::Result<std::vector<uint32_t>> ParsePrefixLengths(std::string_view list);

}  // namespace kvcodec_cli
