#include "cli_lists.h"

#include <cstdlib>

#include "base/comma_list.h"

namespace kvcodec_cli {

kvc::Result<std::map<std::string, std::string>> ParseCodecParams(const std::vector<std::string>& params) {
  std::map<std::string, std::string> out;
  for (const std::string& param : params) RETURN_IF_ERROR(kvc::ParseKeyValues(param, "codec parameter", &out));
  return out;
}

kvc::Result<std::vector<double>> ParseLinkRates(std::string_view list) {
  std::vector<double> out;
  for (const std::string& item : kvc::SplitCommaList(list)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0') {
      return kvc::InvalidArgument("link rate '" + item + "' is not a number of Gbps");
    }
    out.push_back(v);
  }
  return out;
}

kvc::Result<std::vector<uint32_t>> ParsePrefixLengths(std::string_view list) {
  std::vector<uint32_t> out;
  for (const std::string& item : kvc::SplitCommaList(list)) {
    uint64_t v = 0;
    bool ok = !item.empty() && item.size() <= 10;
    for (const char c : item) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok || v > UINT32_MAX) return kvc::InvalidArgument("prefix length '" + item + "' is not a number of tokens");
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

}  // namespace kvcodec_cli
