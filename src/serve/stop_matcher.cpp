#include "meshtrain/serve/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace meshtrain::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::feed(std::string_view piece) {
  if (stopped_) return "";
  held_ += piece;
  // The earliest match of any stop string wins (held_ never holds a whole stop string before this piece).
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  const size_t keep = partial_tail();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::finish() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

size_t StopMatcher::partial_tail() const {
  size_t best = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > best; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace meshtrain::serve
