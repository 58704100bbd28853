#include "base/comma_list.h"

namespace kvc {

std::vector<std::string> SplitCommaList(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (comma != 0) out.emplace_back(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return out;
}

Status ParseKeyValues(std::string_view list, std::string_view what, std::map<std::string, std::string>* out) {
  for (const std::string& item : SplitCommaList(list)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument(std::string(what) + " '" + item + "' is not key=value");
    }
    (*out)[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return Status::Ok();
}

}  // namespace kvc
