#include "serve/stop_filter.h"

#include <algorithm>

namespace kvc {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopFilter::Emit(size_t n) {
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  emitted_ += out.size();
  return out;
}

std::string StopFilter::Push(std::string_view text) {
  if (stopped_) return {};
  if (stops_.empty()) {
    emitted_ += text.size();
    return std::string(text);
  }
  // Only the held text and the new piece can hold a new match: the held part is shorter than
  // the longest stop string, so this stays linear in the text.
  const size_t searched_from = held_.size();
  held_.append(text);
  size_t first = std::string::npos;
  const std::string* found = nullptr;
  for (const std::string& stop : stops_) {
    const size_t from = searched_from >= stop.size() ? searched_from - stop.size() + 1 : 0;
    const size_t at = held_.find(stop, from);
    if (at < first) {
      first = at;
      found = &stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    stop_word_ = *found;
    std::string out = Emit(first);
    held_.clear();
    return out;
  }
  // Hold back the longest end of the text that some stop string begins with. Stop strings are
  // valid UTF-8, so such an end starts on a character boundary and what goes out stays whole.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  return Emit(held_.size() - keep);
}

std::string StopFilter::Finish() {
  if (stopped_) return {};
  return Emit(held_.size());
}

}  // namespace kvc
