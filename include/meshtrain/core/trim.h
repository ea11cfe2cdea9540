// Text without the blanks (spaces, tabs) around it: config overrides, comma lists, doc text.
#pragma once

#include <string>
#include <string_view>

namespace meshtrain {

inline std::string trim_blanks(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

}  // namespace meshtrain
