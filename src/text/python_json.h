// JSON text as Python's json.dumps writes it (private to the text room): what transformers' `tojson` filter
// gives a chat template (ensure_ascii=False): ", " and ": " between items without an indent; with one, each
// item on its own line indented by `indent` spaces per level and "," after it. Keys keep their order unless
// `sort_keys`.
#pragma once

#include <optional>
#include <string>

#include "jinja_expression.h"

namespace meshtrain::text::jinja {

std::string python_json(const Value& v, std::optional<int> indent, bool sort_keys, const std::string& where);

}  // namespace meshtrain::text::jinja
