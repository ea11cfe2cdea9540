// The reflection table of config.h's X-macros: one FieldInfo per key, plus the scalar text conversions and
// the typo matcher that the loader, override parser and printers share (see config_schema.h).
#include "meshtrain/core/config_schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <type_traits>
#include <utility>

#include "meshtrain/core/error.h"
#include "meshtrain/core/trim.h"

namespace meshtrain {
namespace {

template <typename T>
constexpr FieldType field_type_of() {
  if constexpr (std::is_same_v<T, int64_t>) return FieldType::Int;
  else if constexpr (std::is_same_v<T, double>) return FieldType::Double;
  else if constexpr (std::is_same_v<T, bool>) return FieldType::Bool;
  else if constexpr (std::is_same_v<T, std::string>) return FieldType::String;
  else if constexpr (std::is_same_v<T, StringList>) return FieldType::List;
  else {
    static_assert(SpelledEnum<T>, "config fields are int64_t, double, bool, std::string, StringList or an "
                                  "enumeration of core/config_enums.h");
    return FieldType::Enum;
  }
}

template <typename T>
void add_field(std::vector<FieldInfo>& out, std::string_view section, std::string_view key, std::string_view doc,
               void* (*address)(Config&)) {
  FieldInfo f{.section = section, .key = key, .type = field_type_of<T>(), .doc = doc, .address = address};
  if constexpr (SpelledEnum<T>) {
    f.choices = enum_spellings<T>();
    f.choices_note = EnumSpellings<T>::note;
    f.enum_get = [](const void* p) { return static_cast<int>(*static_cast<const T*>(p)); };
    f.enum_set = [](void* p, int i) { *static_cast<T*>(p) = static_cast<T>(i); };
  }
  f.pairs = doc.find("NAME=VALUE pairs") != std::string_view::npos;
  f.sources = doc.find("{path: PATTERN") != std::string_view::npos;
  out.push_back(std::move(f));
}

// One FieldInfo per X-macro row. `Sec` is a local type per section so the captureless lambda can name the
// section member; the static_assert keeps the type tag and the member's real type in step.
#define MT_REFLECT_FIELD(type, key, def, doc)                                                               \
  static_assert(std::is_same_v<decltype(Sec::get(std::declval<Config&>()).key), type>);                   \
  add_field<type>(out, Sec::name(), #key, doc, [](Config& c) -> void* { return &Sec::get(c).key; });

#define MT_REFLECT_SECTION(sec, FIELDS)                        \
  {                                                            \
    struct Sec {                                               \
      static std::string_view name() { return #sec; }          \
      static auto& get(Config& c) { return c.sec; }            \
    };                                                         \
    FIELDS(MT_REFLECT_FIELD)                                   \
  }

std::vector<FieldInfo> build_table() {
  std::vector<FieldInfo> out;
  MT_REFLECT_SECTION(model, MT_MODEL_FIELDS)
  MT_REFLECT_SECTION(parallel, MT_PARALLEL_FIELDS)
  MT_REFLECT_SECTION(comm, MT_COMM_FIELDS)
  MT_REFLECT_SECTION(data, MT_DATA_FIELDS)
  MT_REFLECT_SECTION(optimizer, MT_OPTIMIZER_FIELDS)
  MT_REFLECT_SECTION(schedule, MT_SCHEDULE_FIELDS)
  MT_REFLECT_SECTION(train, MT_TRAIN_FIELDS)
  MT_REFLECT_SECTION(checkpoint, MT_CHECKPOINT_FIELDS)
  MT_REFLECT_SECTION(logging, MT_LOGGING_FIELDS)
  MT_REFLECT_SECTION(serve, MT_SERVE_FIELDS)
  return out;
}
#undef MT_REFLECT_SECTION
#undef MT_REFLECT_FIELD

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps cost 1.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string FieldInfo::path() const { return cat(section, ".", key); }

FieldValue FieldInfo::get(const Config& cfg) const {
  // address() only computes a member's address; the const_cast never leads to a write here.
  void* p = address(const_cast<Config&>(cfg));
  switch (type) {
    case FieldType::Int: return *static_cast<int64_t*>(p);
    case FieldType::Double: return *static_cast<double*>(p);
    case FieldType::Bool: return *static_cast<bool*>(p);
    case FieldType::String: return *static_cast<std::string*>(p);
    case FieldType::Enum: return EnumValue{std::string(choices[static_cast<size_t>(enum_get(p))])};
    case FieldType::List: return *static_cast<StringList*>(p);
  }
  throw Error(cat("bad FieldType for ", path()));
}

void FieldInfo::set(Config& cfg, const FieldValue& v) const {
  MT_CHECK(v.index() == static_cast<size_t>(type), "value of the wrong type for ", path());
  void* p = address(cfg);
  switch (type) {
    case FieldType::Int: *static_cast<int64_t*>(p) = std::get<int64_t>(v); break;
    case FieldType::Double: *static_cast<double*>(p) = std::get<double>(v); break;
    case FieldType::Bool: *static_cast<bool*>(p) = std::get<bool>(v); break;
    case FieldType::String: *static_cast<std::string*>(p) = std::get<std::string>(v); break;
    case FieldType::Enum: {
      const std::string& name = std::get<EnumValue>(v).name;
      const int i = find_spelling(choices, name);
      MT_CHECK(i >= 0, "'", name, "' is no value of ", path(), " (the loader checks spellings)");
      enum_set(p, i);
      break;
    }
    case FieldType::List: *static_cast<StringList*>(p) = std::get<StringList>(v); break;
  }
}

FieldValue FieldInfo::default_value() const {
  static const Config kDefaults;
  return get(kDefaults);
}

const std::vector<FieldInfo>& config_fields() {
  static const std::vector<FieldInfo> kTable = build_table();
  return kTable;
}

const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> kSections = [] {
    std::vector<std::string> out;
    for (const FieldInfo& f : config_fields())
      if (out.empty() || out.back() != f.section) out.emplace_back(f.section);
    return out;
  }();
  return kSections;
}

const FieldInfo* find_config_field(std::string_view section, std::string_view key) {
  for (const FieldInfo& f : config_fields())
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

std::string FieldInfo::type_name() const {
  switch (type) {
    case FieldType::Int: return "int";
    case FieldType::Double: return "float";
    case FieldType::Bool: return "bool";
    case FieldType::String: return "string";
    case FieldType::Enum: return join_spellings(choices);
    case FieldType::List: return "list";
  }
  return "?";
}

std::string FieldInfo::expectation() const {
  switch (type) {
    case FieldType::Int: return "an integer";
    case FieldType::Double: return "a finite number";
    case FieldType::Bool: return "true or false";
    case FieldType::String: return "a string";
    case FieldType::Enum: return cat("one of ", join_spellings(choices));
    case FieldType::List: return "a list of strings (a sequence, or one comma-separated string)";
  }
  return "?";
}

std::string format_field_value(const FieldValue& v) {
  switch (v.index()) {
    case 0: return std::to_string(std::get<int64_t>(v));
    case 1: {
      // The shortest text that reads back to the same double. Small and huge magnitudes in scientific form
      // as configs are usually written ("3e-4", "1e-8", "1e20"), the rest in fixed form ("0.001", "500000.0").
      const double d = std::get<double>(v);
      char buf[64];
      auto sci = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
      std::string s(buf, sci.ptr);
      size_t e = s.find('e');
      if (e == std::string::npos) return s;  // inf, nan
      int exp = std::stoi(s.substr(e + 1));
      if (exp < -3 || exp >= 16) return cat(s.substr(0, e), "e", exp);  // "3e-04" → "3e-4", "1e+20" → "1e20"
      auto fix = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
      s.assign(buf, fix.ptr);
      if (s.find('.') == std::string::npos) s += ".0";  // reads as a float to a human too
      return s;
    }
    case 2: return std::get<bool>(v) ? "true" : "false";
    case 3: return std::get<std::string>(v);
    case 4: return std::get<EnumValue>(v).name;
    default: {
      std::string out;
      for (const std::string& item : std::get<StringList>(v)) out += cat(out.empty() ? "" : ", ", item);
      return cat("[", out, "]");
    }
  }
}

bool parse_field_scalar(FieldType t, std::string_view text, FieldValue& out) {
  // from_chars rejects a leading '+', which YAML allows for numbers.
  std::string_view num = !text.empty() && text[0] == '+' ? text.substr(1) : text;
  switch (t) {
    case FieldType::Int: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (num.empty() || ec != std::errc() || p != num.data() + num.size()) return false;
      out = v;
      return true;
    }
    case FieldType::Double: {
      // from_chars reads "inf" and "nan" (YAML spells them .inf and .nan); no setting means either, so
      // neither spelling is a number here.
      double v = 0;
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (num.empty() || ec != std::errc() || p != num.data() + num.size() || !std::isfinite(v)) return false;
      out = v;
      return true;
    }
    case FieldType::Bool:
      if (text == "true" || text == "True" || text == "TRUE") out = true;
      else if (text == "false" || text == "False" || text == "FALSE") out = false;
      else return false;
      return true;
    case FieldType::String: out = std::string(text); return true;
    case FieldType::Enum:
    case FieldType::List: break;  // need the field: the overload below
  }
  return false;
}

bool parse_field_scalar(const FieldInfo& f, std::string_view text, FieldValue& out) {
  if (f.type == FieldType::Enum) {
    if (find_spelling(f.choices, text) < 0) return false;
    out = EnumValue{std::string(text)};
    return true;
  }
  if (f.type == FieldType::List) {
    out = split_field_list(text);
    return true;
  }
  return parse_field_scalar(f.type, text, out);
}

StringList split_field_list(std::string_view text) {
  StringList out;
  if (trim_blanks(text).empty()) return out;
  // A comma inside braces belongs to a glob's alternatives ("data/{a,b}_*.bin"), not between two items.
  int depth = 0;
  size_t at = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    depth += c == '{' ? 1 : c == '}' && depth > 0 ? -1 : 0;
    if (c != ',' || (depth > 0 && i < text.size())) continue;
    out.push_back(trim_blanks(text.substr(at, i - at)));
    at = i + 1;
  }
  return out;
}

std::string nearest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string w = lower(word);
  // A typo is at most about one edit per three letters; a truncation ("warmup" for "warmup_steps") counts too.
  size_t limit = std::max<size_t>(1, std::min<size_t>(3, w.size() / 3));
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    std::string lc = lower(c);
    size_t d = edit_distance(w, lc);
    bool prefix = w.size() >= 4 && (lc.rfind(w, 0) == 0 || w.rfind(lc, 0) == 0);
    if ((d <= limit || prefix) && d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

}  // namespace meshtrain
