#include "cli_lists.h"

#include <cstdlib>

namespace kvcodec_cli {

std::vector<std::string> SplitList(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (comma != 0) out.emplace_back(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return out;
}

kvc::Result<std::map<std::string, std::string>> ParseCodecParams(const std::vector<std::string>& params) {
  std::map<std::string, std::string> out;
  for (const std::string& param : params) {
    for (const std::string& item : SplitList(param)) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        return kvc::InvalidArgument("codec parameter '" + item + "' is not key=value");
      }
      out[item.substr(0, eq)] = item.substr(eq + 1);
    }
  }
  return out;
}

kvc::Result<std::vector<double>> ParseLinkRates(std::string_view list) {
  std::vector<double> out;
  for (const std::string& item : SplitList(list)) {
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
  for (const std::string& item : SplitList(list)) {
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
