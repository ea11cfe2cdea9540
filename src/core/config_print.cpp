// to_yaml / to_json: every field of a Config, sections in struct order and keys in table order, driven by the
// reflection table. to_yaml is what `meshtrain config FILE` prints and must load back to an equal Config;
// to_json is stored next to checkpoints and metrics (lists as arrays; the loader also reads the comma-separated
// strings that older checkpoints hold).
#include <cctype>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {
namespace {

// Plain YAML when the text can only read back as itself; otherwise a double-quoted scalar (JSON string
// escaping is valid YAML). Text that another YAML reader would take for a number, bool or null is quoted
// too, although our own loader converts by the key's type.
std::string yaml_string(const std::string& s) {
  bool plain = !s.empty();
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == '+'))
      plain = false;
  if (plain && !(std::isalnum(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '/' || s[0] == '.'))
    plain = false;
  FieldValue probe;
  if (plain && (parse_field_scalar(FieldType::Double, s, probe) || parse_field_scalar(FieldType::Bool, s, probe) ||
                s == "null" || s == "Null" || s == "NULL" || s == ".inf" || s == ".nan"))
    plain = false;
  if (plain) return s;
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A value as YAML text: strings and spellings quoted where needed, lists as a flow sequence ("[q, v]").
std::string yaml_value(const FieldValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) return yaml_string(*s);
  if (auto* e = std::get_if<EnumValue>(&v)) return yaml_string(e->name);
  if (auto* list = std::get_if<StringList>(&v)) {
    std::string out;
    for (const std::string& item : *list) out += cat(out.empty() ? "" : ", ", yaml_string(item));
    return cat("[", out, "]");
  }
  return format_field_value(v);
}

// A value as JSON: an enumeration by its spelling, a list as an array.
nlohmann::ordered_json json_value(const FieldValue& v) {
  return std::visit([](const auto& x) -> nlohmann::ordered_json {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, EnumValue>) return x.name;
    else return x;
  }, v);
}

}  // namespace

std::string to_yaml(const Config& cfg) {
  std::string out;
  std::string_view section;
  for (const FieldInfo& f : config_fields()) {
    if (f.section != section) {
      section = f.section;
      out += cat(section, ":\n");
    }
    out += cat("  ", f.key, ": ", yaml_value(f.get(cfg)), "\n");
  }
  return out;
}

std::string to_yaml_template(const Config& cfg, const std::vector<std::string>& written) {
  auto is_written = [&](const FieldInfo& f) {
    for (const std::string& w : written)
      if (w == f.section || w == f.path()) return true;
    return false;
  };
  // The comment of a key left to fill in: its doc, and an enumeration's valid spellings.
  auto comment = [](const FieldInfo& f) {
    return f.type == FieldType::Enum ? cat(f.doc, " (one of: ", f.type_name(), ")") : std::string(f.doc);
  };
  std::string out;
  std::string_view section;
  bool section_written = false;
  for (const FieldInfo& f : config_fields()) {
    if (f.section != section) {
      section = f.section;
      section_written = false;
      for (const FieldInfo& g : config_fields())
        if (g.section == section && is_written(g)) section_written = true;
      out += cat(section_written ? "" : "# ", section, ":\n");
    }
    if (is_written(f)) out += cat("  ", f.key, ": ", yaml_value(f.get(cfg)), "\n");
    else out += cat(section_written ? "  # " : "#   ", f.key, ": ", yaml_value(f.default_value()), "  # ", comment(f), "\n");
  }
  return out;
}

std::string to_json(const Config& cfg) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  for (const FieldInfo& f : config_fields()) {
    nlohmann::ordered_json& sec = root[std::string(f.section)];
    sec[std::string(f.key)] = json_value(f.get(cfg));
  }
  // nlohmann writes doubles in the shortest form that reads back exactly (0.0003, 1e-08).
  return root.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);  // no trailing newline
}

}  // namespace meshtrain
