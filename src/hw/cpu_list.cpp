#include "meshtrain/hw/cpu_list.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain::hw {
namespace {

// "N" → N; anything else (sign, blank, letters, overflow) → -1.
long parse_cpu(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
    return -1;
  return std::stol(s);
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    part.erase(std::remove_if(part.begin(), part.end(), [](unsigned char c) { return std::isspace(c); }),
               part.end());
    if (part.empty()) continue;
    const auto dash = part.find('-');
    const long a = parse_cpu(part.substr(0, dash));
    const long b = dash == std::string::npos ? a : parse_cpu(part.substr(dash + 1));
    MT_USER_CHECK(a >= 0 && b >= a, "CPU list '", text, "': '", part, "' is not N or N-M (e.g. 0-15,64-79)");
    for (long c = a; c <= b; ++c) cpus.push_back(static_cast<int>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace meshtrain::hw
