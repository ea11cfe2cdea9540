#include "meshtrain/core/byte_size.h"

#include <exception>

#include "meshtrain/core/error.h"

namespace meshtrain {

size_t parse_bytes(const std::string& what, const std::string& v) {
  size_t pos = 0;
  double x = 0;
  try {
    x = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string unit = v.substr(pos);
  const double mult = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
                    : unit == "G" ? 1073741824.0 : -1;
  MT_USER_CHECK(pos > 0 && mult > 0 && x >= 0, what, ": given '", v, "'; valid: bytes, optionally with K, M or G");
  return static_cast<size_t>(x * mult);
}

}  // namespace meshtrain
