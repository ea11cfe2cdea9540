// Loading a Config: YAML (yaml-cpp) or JSON (nlohmann) text → a list of typed assignments, checked against the
// reflection table (config_schema.h), then applied in the documented order: model preset first, then the
// file's own keys, then `--set section.key=value` overrides. Every user mistake is one UserError line naming
// the file (with line:col where the parser knows it) or the override, and what would be valid.
// g++ 12 at -O2 reports false -Wdangling-pointer positives inside yaml-cpp 0.7's node/impl.h after inlining
// (known yaml-cpp/GCC issue); the header is not ours, so silence that one warning for it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#include <yaml-cpp/depthguard.h>  // YAML::DeepRecursion
#include <yaml-cpp/yaml.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"
#include "meshtrain/core/trim.h"

namespace meshtrain {
namespace {

// One value destined for one field, with where it came from ("cfg.yaml:3:7" or "--set a.b=c") for messages.
struct Assignment {
  const FieldInfo* field;
  FieldValue value;
  std::string origin;
};

std::string yaml_where(const std::string& name, const YAML::Mark& m) {
  if (m.line < 0 || m.column < 0) return name;  // yaml-cpp's null mark: no position known
  return cat(name, ":", m.line + 1, ":", m.column + 1);
}

// "did you mean …?" for a section name, or the list of valid sections.
[[noreturn]] void unknown_section(const std::string& origin, const std::string& section) {
  std::string near = nearest_match(section, config_sections());
  if (!near.empty())
    throw UserError(cat(origin, ": unknown section '", section, "'; did you mean '", near, "'?"));
  throw UserError(cat(origin, ": unknown section '", section, "'; valid sections: ", join(config_sections(), ", ")));
}

// Resolves section.key or throws "unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?". When no key of
// the section is close, a key of that exact name in another section is suggested ("train.lr" → "optimizer.lr"),
// else the section's valid keys are listed.
const FieldInfo& lookup_field(const std::string& origin, const std::string& section, const std::string& key) {
  if (const FieldInfo* f = find_config_field(section, key)) return *f;
  std::vector<std::string> keys;
  for (const FieldInfo& f : config_fields())
    if (f.section == section) keys.emplace_back(f.key);
  if (keys.empty()) unknown_section(origin, section);
  std::string near = nearest_match(key, keys);
  if (near.empty()) {
    for (const FieldInfo& f : config_fields())
      if (f.key == key) near = cat(f.section, ".", f.key);
    if (!near.empty())
      throw UserError(cat(origin, ": unknown key '", section, ".", key, "'; did you mean '", near, "'?"));
    throw UserError(cat(origin, ": unknown key '", section, ".", key, "'; valid keys of '", section,
                        "': ", join(keys, ", ")));
  }
  throw UserError(cat(origin, ": unknown key '", section, ".", key, "'; did you mean '", section, ".", near, "'?"));
}

[[noreturn]] void wrong_type(const std::string& origin, const FieldInfo& f, const std::string& got) {
  throw UserError(cat(origin, ": ", f.path(), ": expected ", f.expectation(), ", got ", got));
}

// "ORIGIN: model.family: given 'bert'; valid gpt2 | llama" (with the nearest spelling, or the enumeration's note).
[[noreturn]] void refused_value(const std::string& origin, const FieldInfo& f, const std::string& given) {
  throw_refused_spelling(cat(origin, ": ", f.path()), given, f.choices, f.choices_note);
}

// Scalar text converted by the field's type: an enumeration's unknown spelling is refused with the valid ones,
// any other misfit as a wrong type described by `got`.
FieldValue scalar_value(const std::string& origin, const FieldInfo& f, const std::string& text,
                        const std::string& got) {
  FieldValue v;
  if (parse_field_scalar(f, text, v)) return v;
  if (f.type == FieldType::Enum) refused_value(origin, f, text);
  wrong_type(origin, f, got);
}

bool is_null_literal(std::string_view s) { return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL"; }

// ---- YAML ------------------------------------------------------------------------------------------------

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
    default: return cat("'", n.Scalar(), "'");
  }
}

// A NAME=VALUE field (FieldInfo::pairs) given as a mapping `NAME: VALUE` or a list of `NAME=VALUE` is
// folded into its one-string form, "NAME=VALUE NAME=VALUE"; a value holding a space could not be read back.
FieldValue pairs_from_yaml(const std::string& origin, const FieldInfo& f, const YAML::Node& n) {
  std::string out;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node item = n.IsMap() ? it->second : *it;
    if (!item.IsScalar() || (n.IsMap() && !it->first.IsScalar())) wrong_type(origin, f, describe(item));
    std::string pair = n.IsMap() ? cat(it->first.Scalar(), "=", item.Scalar()) : item.Scalar();
    if (pair.find_first_of(" \t\n") != std::string::npos)
      throw UserError(cat(origin, ": ", f.path(), ": '", pair, "' holds a space; NAME=VALUE values cannot"));
    out += (out.empty() ? "" : " ") + pair;
  }
  return out;
}

// A data source given as a mapping {path: P, weight: W} (FieldInfo::sources) → "P:W", or "P" without a weight.
std::string source_from_yaml(const std::string& origin, const FieldInfo& f, const YAML::Node& item) {
  std::string path, weight;
  for (auto it = item.begin(); it != item.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : describe(it->first);
    if (!it->second.IsScalar() || (key != "path" && key != "weight"))
      throw UserError(cat(origin, ": ", f.path(), ": a source {", key, ": ", describe(it->second),
                          "}; valid: {path: PATTERN, weight: NUMBER} (weight optional) or 'PATTERN:WEIGHT'"));
    (key == "path" ? path : weight) = it->second.Scalar();
  }
  if (path.empty())
    throw UserError(cat(origin, ": ", f.path(), ": a source without a path; valid: {path: PATTERN, weight: NUMBER}"));
  return weight.empty() ? path : cat(path, ":", weight);
}

// A list given as a sequence of scalars (`[a, b]` or one `- a` per line); an empty item (`-`) is kept as "".
StringList list_from_yaml(const std::string& origin, const FieldInfo& f, const YAML::Node& n) {
  StringList out;
  for (const YAML::Node& item : n) {
    if (f.sources && item.IsMap()) {
      out.push_back(source_from_yaml(origin, f, item));
      continue;
    }
    if (!item.IsNull() && !item.IsScalar()) wrong_type(origin, f, cat("a sequence holding ", describe(item)));
    out.push_back(item.IsNull() ? std::string() : item.Scalar());
  }
  return out;
}

// Any scalar converts by the field's type (so `lr: "3e-4"` is a number, `val: 123` the string "123"; a list
// also takes one comma-separated string); null is "" for strings, [] for lists and an error otherwise.
FieldValue from_yaml(const std::string& origin, const FieldInfo& f, const YAML::Node& n) {
  if (n.IsNull() && f.type == FieldType::String) return std::string();
  if (n.IsNull() && f.type == FieldType::List) return StringList{};
  if (f.type == FieldType::List && n.IsSequence()) return list_from_yaml(origin, f, n);
  if (f.pairs && (n.IsMap() || n.IsSequence())) return pairs_from_yaml(origin, f, n);
  if (!n.IsScalar()) wrong_type(origin, f, describe(n));
  return scalar_value(origin, f, n.Scalar(), describe(n));
}

// The file's one document. A second one (after `---`) would be dropped by YAML::Load without a word, so it is
// refused; an empty trailing document (a final `---`) holds nothing to lose. yaml-cpp reports running out of
// nesting depth as "bad file", which names neither cause nor limit: say both.
YAML::Node load_one_document(const std::string& text, const std::string& name) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::DeepRecursion& e) {
    throw UserError(cat(yaml_where(name, e.mark), ": nested ", e.depth(), " levels deep, beyond the YAML parser's "
                        "limit; a config has two levels (section: then key: value)"));
  } catch (const YAML::Exception& e) {
    throw UserError(cat(yaml_where(name, e.mark), ": ", e.msg));
  }
  for (size_t i = 1; i < docs.size(); ++i)
    if (!docs[i].IsNull())
      throw UserError(cat(yaml_where(name, docs[i].Mark()), ": a second YAML document (after '---'); a config is "
                          "one document: merge them, or override values with --set"));
  return docs.empty() ? YAML::Node() : docs.front();
}

std::vector<Assignment> read_yaml(const std::string& text, const std::string& name) {
  const YAML::Node root = load_one_document(text, name);
  std::vector<Assignment> out;
  if (root.IsNull()) return out;  // an empty file: every default
  if (!root.IsMap())
    throw UserError(cat(yaml_where(name, root.Mark()), ": expected a mapping of sections (",
                        join(config_sections(), ", "), "), got ", describe(root)));
  std::map<std::string, YAML::Mark> seen_sections;
  for (auto sec = root.begin(); sec != root.end(); ++sec) {
    const YAML::Node& skey = sec->first;
    std::string where = yaml_where(name, skey.Mark());
    if (!skey.IsScalar()) throw UserError(cat(where, ": section names are plain words, got ", describe(skey)));
    const std::string section = skey.Scalar();
    if (std::find(config_sections().begin(), config_sections().end(), section) == config_sections().end())
      unknown_section(where, section);
    // yaml-cpp keeps both entries of a repeated key; which one wins would be an accident, so refuse.
    if (auto [it, fresh] = seen_sections.emplace(section, skey.Mark()); !fresh)
      throw UserError(cat(where, ": duplicate section '", section, "' (first at line ", it->second.line + 1, ")"));
    const YAML::Node& body = sec->second;
    if (body.IsNull()) continue;
    if (!body.IsMap())
      throw UserError(cat(yaml_where(name, body.Mark()), ": ", section, ": expected a mapping of keys, got ",
                          describe(body)));
    std::map<std::string, YAML::Mark> seen_keys;
    for (auto kv = body.begin(); kv != body.end(); ++kv) {
      const YAML::Node& k = kv->first;
      std::string kwhere = yaml_where(name, k.Mark());
      if (!k.IsScalar()) throw UserError(cat(kwhere, ": ", section, ": keys are plain words, got ", describe(k)));
      const FieldInfo& f = lookup_field(kwhere, section, k.Scalar());
      if (auto [it, fresh] = seen_keys.emplace(k.Scalar(), k.Mark()); !fresh)
        throw UserError(cat(kwhere, ": duplicate key '", f.path(), "' (first at line ", it->second.line + 1, ")"));
      // A missing value (`lr:`) carries the mark of whatever token follows it; point at the key instead.
      std::string vwhere = kv->second.IsNull() ? kwhere : yaml_where(name, kv->second.Mark());
      out.push_back({&f, from_yaml(vwhere, f, kv->second), vwhere});
    }
  }
  return out;
}

// ---- JSON ------------------------------------------------------------------------------------------------

// ordered_json keeps the document's key order, so the first error reported is the first in the file.
using Json = nlohmann::ordered_json;

std::string describe(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return cat("'", j.get<std::string>(), "'");
    default: return j.dump();
  }
}

// A list: an array of strings, or the one comma-separated string that configs (and the config stored in
// checkpoints' meta.json) held before lists had a type of their own; null is [].
StringList list_from_json(const std::string& origin, const FieldInfo& f, const Json& j) {
  if (j.is_null()) return {};
  if (j.is_string()) return split_field_list(j.get<std::string>());
  if (!j.is_array()) wrong_type(origin, f, describe(j));
  StringList out;
  for (const Json& item : j) {
    if (f.sources && item.is_object()) {  // {"path": P, "weight": W}: as YAML's mapping, through its reader
      out.push_back(source_from_yaml(origin, f, YAML::Load(item.dump())));
      continue;
    }
    if (!item.is_string()) wrong_type(origin, f, cat("an array holding ", describe(item)));
    out.push_back(item.get<std::string>());
  }
  return out;
}

// JSON has types of its own, so they are checked as given: an int field takes an integer literal (not 8.0),
// a number field any number, a bool field true/false, a string field a string or null (""), an enumeration
// one of its spellings as a string, a list an array of strings (or one comma-separated string).
FieldValue from_json(const std::string& origin, const FieldInfo& f, const Json& j) {
  switch (f.type) {
    case FieldType::Enum:
      if (!j.is_string()) wrong_type(origin, f, describe(j));
      return scalar_value(origin, f, j.get<std::string>(), describe(j));
    case FieldType::List: return list_from_json(origin, f, j);
    case FieldType::Int:
      if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        wrong_type(origin, f, describe(j));
      if (!j.is_number_integer()) wrong_type(origin, f, describe(j));
      return j.get<int64_t>();
    case FieldType::Double:
      // A literal too large for a double (1e999) reads as inf.
      if (!j.is_number() || !std::isfinite(j.get<double>())) wrong_type(origin, f, describe(j));
      return j.get<double>();
    case FieldType::Bool:
      if (!j.is_boolean()) wrong_type(origin, f, describe(j));
      return j.get<bool>();
    case FieldType::String:
      if (j.is_null()) return std::string();
      // NAME=VALUE pairs as an object {"NAME": "VALUE"} or an array of "NAME=VALUE": as YAML's mapping and
      // sequence, through its reader (one rule for both formats).
      if (f.pairs && (j.is_object() || j.is_array())) return pairs_from_yaml(origin, f, YAML::Load(j.dump()));
      if (!j.is_string()) wrong_type(origin, f, describe(j));
      return j.get<std::string>();
  }
  wrong_type(origin, f, describe(j));
}

// nlohmann reports the byte offset of a syntax error; editors want line:col (1-based; col counts bytes).
std::string json_where(const std::string& name, const std::string& text, size_t byte) {
  size_t pos = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + pos, '\n'));
  size_t line_start = text.rfind('\n', pos == 0 ? std::string::npos : pos - 1);
  if (pos == 0) line_start = std::string::npos;
  size_t col = line_start == std::string::npos ? pos + 1 : pos - line_start;
  return cat(name, ":", line, ":", col);
}

// "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error …" → "syntax error …".
std::string json_message(const std::string& what) {
  size_t at = what.find("parse error");
  size_t colon = at == std::string::npos ? std::string::npos : what.find(": ", at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

Json parse_json(const std::string& text, const std::string& name) {
  // nlohmann silently keeps the last of repeated keys; the parse callback sees every key, so refuse them
  // here as the YAML reader does. One set of keys per open object.
  std::vector<std::pair<std::string, std::set<std::string>>> open;  // (key that opened it, keys seen)
  std::string last_key;
  auto callback = [&](int /*depth*/, Json::parse_event_t ev, Json& parsed) {
    switch (ev) {
      case Json::parse_event_t::object_start: open.emplace_back(last_key, std::set<std::string>{}); break;
      case Json::parse_event_t::object_end: open.pop_back(); break;
      case Json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        if (!open.empty() && !open.back().second.insert(last_key).second) {
          std::string path = open.size() > 1 ? cat(open.back().first, ".", last_key) : last_key;
          throw UserError(cat(name, ": duplicate key '", path, "'"));
        }
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text, callback, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    throw UserError(cat(json_where(name, text, e.byte), ": ", json_message(e.what())));
  } catch (const Json::out_of_range& e) {
    // A literal beyond a double (1e999): "[json.exception.out_of_range.406] number overflow parsing '1e999'".
    const std::string what = e.what();
    throw UserError(cat(name, ": ", what.substr(what.find(']') + 2), "; valid: finite numbers"));
  }
}

std::vector<Assignment> read_json(const std::string& text, const std::string& name) {
  Json root = parse_json(text, name);
  if (!root.is_object())
    throw UserError(cat(name, ": expected an object of sections (", join(config_sections(), ", "), "), got ",
                        describe(root)));
  std::vector<Assignment> out;
  for (const auto& [section, body] : root.items()) {
    if (std::find(config_sections().begin(), config_sections().end(), section) == config_sections().end())
      unknown_section(name, section);
    if (body.is_null()) continue;
    if (!body.is_object())
      throw UserError(cat(name, ": ", section, ": expected an object of keys, got ", describe(body)));
    for (const auto& [key, value] : body.items()) {
      const FieldInfo& f = lookup_field(name, section, key);
      out.push_back({&f, from_json(name, f, value), name});
    }
  }
  return out;
}

// ---- overrides -------------------------------------------------------------------------------------------

// A list from --set: a YAML flow sequence ("[a, b]") or one comma-separated string ("a.*,b.*", also when it is
// no plain YAML scalar, as "*.bin,x" is not). Text that opens a flow sequence but is none ("[a, b", "[a?, b]")
// is refused: split at its commas it would become items holding the brackets.
FieldValue list_override(const std::string& origin, const FieldInfo& f, const std::string& raw, bool parsed,
                         const YAML::Node& node, const std::string& parse_error) {
  if (parsed && node.IsSequence()) return list_from_yaml(origin, f, node);
  if (!raw.empty() && raw.front() == '[')
    throw UserError(cat(origin, ": ", f.path(), ": not a YAML flow list (", parse_error.empty() ? "not a sequence"
                        : parse_error, "); valid: [a, b], items quoted where they hold ',', ':', '?', '#', '[' or ']' "
                        "(['Who made the light?', b]), or a,b"));
  if (parsed && node.IsScalar()) return split_field_list(node.Scalar());
  if (parsed && node.IsNull() && is_null_literal(raw)) return StringList{};
  return split_field_list(raw);
}

// "section.key=value", the value read as a YAML scalar ("3e-4", "true", "'quoted text'"). A string field
// also takes text that is not a plain YAML scalar ("*.bin", "a: b") as written, since that is what a shell
// user means.
Assignment read_override(const std::string& ov) {
  const std::string origin = cat("--set ", ov);
  size_t eq = ov.find('=');
  if (eq == std::string::npos) throw UserError(cat(origin, ": expected section.key=value (no '=')"));
  std::string path = trim_blanks(std::string_view(ov).substr(0, eq));
  std::string raw = trim_blanks(std::string_view(ov).substr(eq + 1));
  size_t dot = path.find('.');
  if (dot == std::string::npos) {
    std::string hint;
    for (const FieldInfo& f : config_fields())
      if (f.key == path) hint = cat("; did you mean '", f.path(), "=", raw, "'?");
    throw UserError(cat(origin, ": expected section.key=value ('", path, "' has no section)", hint));
  }
  const FieldInfo& f = lookup_field(origin, path.substr(0, dot), path.substr(dot + 1));

  YAML::Node node;
  bool parsed = true;
  std::string parse_error;
  try {
    node = YAML::Load(raw);
  } catch (const YAML::Exception& e) {
    parsed = false;
    parse_error = e.msg;
  }
  if (f.type == FieldType::String) {
    if (parsed && node.IsScalar()) return {&f, node.Scalar(), origin};
    if (parsed && node.IsNull() && is_null_literal(raw)) return {&f, std::string(), origin};
    return {&f, raw, origin};  // "*.bin", "a: b", "#tag": the text as typed
  }
  if (f.type == FieldType::List) return {&f, list_override(origin, f, raw, parsed, node, parse_error), origin};
  if (!parsed || !node.IsScalar()) {
    if (f.type == FieldType::Enum) refused_value(origin, f, raw);
    wrong_type(origin, f, cat("'", raw, "'"));
  }
  return {&f, scalar_value(origin, f, node.Scalar(), cat("'", raw, "'")), origin};
}

// ---- assembling --------------------------------------------------------------------------------------------

Config build(const std::string& name, const std::vector<Assignment>& file, const std::vector<Assignment>& sets) {
  Config cfg;
  cfg.source = name;
  // The preset goes first so that every explicit model key, from the file or --set, overrides it; the last
  // word on which preset wins (an override beats the file).
  const FieldInfo* preset_field = find_config_field("model", "preset");
  const Assignment* preset = nullptr;
  for (const auto* list : {&file, &sets})
    for (const Assignment& a : *list)
      if (a.field == preset_field) preset = &a;
  if (preset && !std::get<std::string>(preset->value).empty()) {
    try {
      apply_model_preset(std::get<std::string>(preset->value), cfg.model);
    } catch (const UserError& e) {
      throw UserError(cat(preset->origin, ": ", e.what()));
    }
  }
  for (const Assignment& a : file) a.field->set(cfg, a.value);
  for (const Assignment& a : sets) a.field->set(cfg, a.value);
  return cfg;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& name, bool json,
                    const std::vector<std::string>& overrides) {
  std::vector<Assignment> file = json ? read_json(text, name) : read_yaml(text, name);
  std::vector<Assignment> sets;
  for (const std::string& ov : overrides) sets.push_back(read_override(ov));
  return build(name, file, sets);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::string lower = path;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool json = ends_with(lower, ".json");
  if (!json && !ends_with(lower, ".yaml") && !ends_with(lower, ".yml"))
    throw UserError(cat(path, ": unsupported config file extension; valid: .yaml, .yml (YAML) or .json (JSON)"));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(cat(path, ": cannot read config file: is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw UserError(cat(path, ": cannot read config file: ", std::strerror(err ? err : ENOENT)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError(cat(path, ": cannot read config file: read error"));
  return parse_config(text.str(), path, json, overrides);
}

}  // namespace meshtrain
