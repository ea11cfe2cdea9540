// Spelling look-ups and refusals of closed enumerations; see enum_names.h.
#include "meshtrain/core/enum_names.h"

#include <vector>

#include "meshtrain/core/config_schema.h"  // nearest_match
#include "meshtrain/core/error.h"

namespace meshtrain {

int find_spelling(std::span<const std::string_view> spellings, std::string_view text) {
  for (std::size_t i = 0; i < spellings.size(); ++i)
    if (spellings[i] == text) return static_cast<int>(i);
  return -1;
}

std::string join_spellings(std::span<const std::string_view> spellings) {
  std::string out;
  for (std::string_view s : spellings) out += cat(out.empty() ? "" : " | ", s);
  return out;
}

std::string refused_spelling(std::string_view given, std::span<const std::string_view> spellings,
                             std::string_view note) {
  const std::string near = nearest_match(given, std::vector<std::string>(spellings.begin(), spellings.end()));
  std::string out = cat("given '", given, "'; valid ", join_spellings(spellings));
  if (!near.empty()) return cat(out, " (did you mean '", near, "'?)");
  if (!note.empty()) return cat(out, " (", note, ")");
  return out;
}

void throw_refused_spelling(std::string_view where, std::string_view given,
                            std::span<const std::string_view> spellings, std::string_view note) {
  throw UserError(cat(where, ": ", refused_spelling(given, spellings, note)));
}

}  // namespace meshtrain
