// Byte-level tokens (vocab 256, what `meshtrain prepare` writes): each byte of the text is one token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

inline std::vector<int64_t> encode_bytes(std::string_view text) {
  return std::vector<int64_t>(reinterpret_cast<const unsigned char*>(text.data()),
                              reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

// Tokens outside 0..255 (a model with a larger vocabulary) show as '?'.
inline std::string decode_bytes(const std::vector<int64_t>& tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int64_t t : tokens) s.push_back(t >= 0 && t < 256 ? static_cast<char>(t) : '?');
  return s;
}

}  // namespace meshtrain::data
