// Items joined by a separator ("q, v", "gpt2 | llama"), for messages that list what was given or is valid.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

inline std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) (out += i ? sep : std::string_view()) += items[i];
  return out;
}

}  // namespace meshtrain
