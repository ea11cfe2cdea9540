// Reflection over the config's X-macro tables (config.h): one FieldInfo per key, in declaration order, with
// its section, type, doc text, default, an enumeration's valid spellings and typed access into a Config. The
// loader, the override parser and the printers (YAML/JSON/Markdown) are all driven by this table, so adding a
// field to config.h needs no per-field code anywhere else.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

enum class FieldType { Int, Double, Bool, String, Enum, List };

// An enumeration's value by its spelling ("llama"); FieldInfo::set refuses a spelling the field lacks.
struct EnumValue {
  std::string name;
  bool operator==(const EnumValue&) const = default;
};

// A field's value; the alternative always matches the field's FieldType (same order).
using FieldValue = std::variant<int64_t, double, bool, std::string, EnumValue, StringList>;

struct FieldInfo {
  std::string_view section;  // "optimizer"
  std::string_view key;      // "lr"
  FieldType type;
  std::string_view doc;
  // Enum: the valid spellings (index = the enumerator's value) and the note said when a value is refused.
  std::span<const std::string_view> choices;
  std::string_view choices_note;
  // A string of "NAME=VALUE" pairs (the doc says "NAME=VALUE pairs"): YAML may give it as a mapping or list.
  bool pairs = false;
  // A list of data sources (the doc says "{path: PATTERN"): YAML and JSON may give an item as a mapping
  // {path: P, weight: W}, folded into "P:W" (core/data_sources.h).
  bool sources = false;
  void* (*address)(Config&);         // where the field lives inside a Config
  // Enum: the enumerator's value at an address, read and written without knowing its type.
  int (*enum_get)(const void*) = nullptr;
  void (*enum_set)(void*, int) = nullptr;

  std::string path() const;  // "optimizer.lr"
  FieldValue get(const Config& cfg) const;
  // `v` must hold the field's type (throws meshtrain::Error otherwise: a bug, not a user mistake).
  void set(Config& cfg, const FieldValue& v) const;
  FieldValue default_value() const;  // the value in a default-constructed Config
  // "int", "float", "bool", "string", "gpt2 | llama" (an enumeration's spellings), "list" (docs/config.md).
  std::string type_name() const;
  // "an integer", …, "one of gpt2 | llama", "a list of strings" (wrong-type messages).
  std::string expectation() const;
};

// Every field of every section, in struct order (model, parallel, …, logging, serve) then declaration order.
const std::vector<FieldInfo>& config_fields();
// The ten section names in struct order.
const std::vector<std::string>& config_sections();
// nullptr when there is no such field.
const FieldInfo* find_config_field(std::string_view section, std::string_view key);

// A value as a plain YAML scalar: doubles in the shortest text that reads back to the same double, scientific
// below 1e-3 and from 1e16 (3e-4 → "3e-4", 1e-8 → "1e-8", 0.001 → "0.001", 500000 → "500000.0"), bools
// true/false, strings and enumerations unquoted (callers quote), lists as "[a, b]" (items unquoted).
std::string format_field_value(const FieldValue& v);

// Converts scalar text to the field's type. Ints must be integral ("8", "-3"), numbers are anything strtod
// reads fully ("3e-4", "1", ".5"), bools true/false (any case YAML 1.2 allows), strings take the text as is,
// enumerations one of their spellings, lists one comma-separated string (split_field_list). Returns false
// when the text does not fit the type.
bool parse_field_scalar(const FieldInfo& f, std::string_view text, FieldValue& out);
bool parse_field_scalar(FieldType t, std::string_view text, FieldValue& out);  // Int, Double, Bool, String

// A list's one-string form: "a, b,c" → {a, b, c} (blanks around items trimmed); "" or blanks → {}. An empty
// item ("a,,b", "a,") is kept as "", for validate() to name. Commas inside braces stay in their item: a glob's
// alternatives ("data/{a,b}.bin,c.bin" → {data/{a,b}.bin, c.bin}).
StringList split_field_list(std::string_view text);

// The candidate nearest to `word` by edit distance (transpositions count 1), or "" when none is close
// enough to be a plausible typo.
std::string nearest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace meshtrain
