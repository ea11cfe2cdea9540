// Reflection over the config's X-macro tables (config.h): one FieldInfo per key, in declaration order, with
// its section, type, doc text, default and typed access into a Config. The loader, the override parser, the
// printers (YAML/JSON/Markdown) and the enumeration checks of validate() are all driven by this table, so
// adding a field to config.h needs no per-field code anywhere else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

enum class FieldType { Int, Double, Bool, String };

// A field's value; the alternative always matches the field's FieldType.
using FieldValue = std::variant<int64_t, double, bool, std::string>;

struct FieldInfo {
  std::string_view section;  // "optimizer"
  std::string_view key;      // "lr"
  FieldType type;
  std::string_view doc;
  // Closed enumerations, parsed from the doc's "one of: a | b | c" (empty when the field is not one).
  std::vector<std::string> choices;
  bool choices_allow_empty = false;  // the doc's list ends with ", or empty"
  // A string of "NAME=VALUE" pairs (the doc says "NAME=VALUE pairs"): YAML may give it as a mapping or list.
  bool pairs = false;
  void* (*address)(Config&);         // where the field lives inside a Config

  std::string path() const;  // "optimizer.lr"
  FieldValue get(const Config& cfg) const;
  // `v` must hold the field's type (throws meshtrain::Error otherwise: a bug, not a user mistake).
  void set(Config& cfg, const FieldValue& v) const;
  FieldValue default_value() const;  // the value in a default-constructed Config
};

// Every field of every section, in struct order (model, parallel, …, logging) then declaration order.
const std::vector<FieldInfo>& config_fields();
// The nine section names in struct order.
const std::vector<std::string>& config_sections();
// nullptr when there is no such field.
const FieldInfo* find_config_field(std::string_view section, std::string_view key);

// "int", "float", "bool", "string" (the type column of docs/config.md).
std::string_view field_type_name(FieldType t);
// "an integer", "a finite number", "true or false", "a string" (wrong-type messages).
std::string_view field_type_expectation(FieldType t);

// A value as a plain YAML scalar: doubles in the shortest text that reads back to the same double, scientific
// below 1e-3 and from 1e16 (3e-4 → "3e-4", 1e-8 → "1e-8", 0.001 → "0.001", 500000 → "500000.0"), bools
// true/false, strings unquoted (callers quote).
std::string format_field_value(const FieldValue& v);

// Converts scalar text to the field's type. Ints must be integral ("8", "-3"), numbers are anything strtod
// reads fully ("3e-4", "1", ".5"), bools true/false (any case YAML 1.2 allows), strings take the text as is.
// Returns false when the text does not fit the type.
bool parse_field_scalar(FieldType t, std::string_view text, FieldValue& out);

// The candidate nearest to `word` by edit distance (transpositions count 1), or "" when none is close
// enough to be a plausible typo.
std::string nearest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace meshtrain
