#include "meshtrain/core/data_sources.h"

#include <charconv>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain {

DataSource parse_data_source(const std::string& entry) {
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos) return {entry};
  // Only a number after the last ':' is a weight: any other text is part of the file name.
  const std::string_view w = std::string_view(entry).substr(colon + 1);
  const std::string_view num = !w.empty() && w.front() == '+' ? w.substr(1) : w;
  double v = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (num.empty() || ec != std::errc() || end != num.data() + num.size()) return {entry};
  return {entry.substr(0, colon), v, true};
}

std::vector<DataSource> parse_data_sources(const StringList& entries) {
  std::vector<DataSource> out;
  for (const auto& e : entries) out.push_back(parse_data_source(e));
  return out;
}

bool is_synthetic_data(const StringList& train) { return train.size() == 1 && train.front() == kSyntheticData; }

void validate_data_sources(const StringList& entries, const std::string& where, const std::string& key,
                           bool weights_allowed) {
  const std::string head = cat(where, key, ": ");
  size_t weighted = 0;
  for (const auto& entry : entries) {
    const DataSource s = parse_data_source(entry);
    MT_USER_CHECK(!s.pattern.empty(), head, "an empty entry in ", entries.size(), " sources; valid: a file or glob "
                  "per entry (a trailing comma leaves an empty one)");
    MT_USER_CHECK(entry != kSyntheticData || (weights_allowed && entries.size() == 1), head, "'", entry,
                  "' among ", entries.size(), " sources; valid: synthetic alone (data.train only) or shard files");
    if (!s.weighted) continue;
    MT_USER_CHECK(weights_allowed, head, "'", entry, "' has a weight; validation sources take none (each is "
                  "evaluated whole and its loss reported on its own): give '", s.pattern, "'");
    MT_USER_CHECK(std::isfinite(s.weight) && s.weight > 0, head, "'", entry, "': weight ", s.weight,
                  "; valid a number > 0 (the source's share of the sampled sequences, weights normalised)");
    ++weighted;
  }
  MT_USER_CHECK(weighted == 0 || weighted == entries.size(), head, weighted, " of ", entries.size(),
                " sources have a weight; valid: every one (PATTERN:WEIGHT, shares normalised) or none "
                "(drawn in proportion to their tokens)");
}

}  // namespace meshtrain
