#include "jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <functional>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/text/normalizer.h"
#include "meshtrain/text/unicode.h"
#include "python_json.h"

namespace meshtrain::text::jinja {

Value Args::get(size_t i, const char* name, const Value& fallback) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : named)
    if (k == name) return v;
  return fallback;
}

namespace {

using Filter = std::function<Value(const Value&, const Args&, const std::string&)>;
using Test = std::function<bool(const Value&, const Args&, const std::string&)>;
using Method = std::function<Value(const Value&, const Args&, const std::string&)>;

[[noreturn]] void builtin_fail(const std::string& where, const std::string& what) { throw UserError(cat(where, ": ", what)); }

std::string kind_name(const Value& v) { return v.is_discarded() ? "undefined" : v.type_name(); }

const std::string& need_string(const Value& v, const std::string& what, const std::string& where) {
  if (!v.is_string()) builtin_fail(where, cat(what, " needs a string, got ", kind_name(v)));
  return v.get_ref<const std::string&>();
}

int64_t need_int(const Value& v, const std::string& what, const std::string& where) {
  if (!v.is_number_integer()) builtin_fail(where, cat(what, " needs an integer, got ", kind_name(v)));
  return v.get<int64_t>();
}

bool python_space(char32_t cp) { return char_class(cp) == CharClass::Space || (cp >= 0x1C && cp <= 0x1F); }

std::string ascii_cased(std::string s, int mode) {  // 0 lower, 1 upper
  for (char& c : s) c = static_cast<char>(mode ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string capitalized(const std::string& s) {
  std::string out = ascii_cased(s, 0);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string titled(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    c = static_cast<char>(alpha && !prev_alpha ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    prev_alpha = alpha;
  }
  return out;
}

std::string replaced(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                     const std::string& where) {
  if (from.empty()) builtin_fail(where, "replace with an empty pattern is not supported");
  return replace_literal(s, from, to, static_cast<long>(count));
}

// Python's str.split: on `sep`, or on runs of white space (empty pieces dropped) when it is none.
Value split_string(const std::string& s, const Value& sep, int64_t maxsplit, const std::string& where) {
  Value out = Value::array();
  if (sep.is_null() || sep.is_discarded()) {
    const auto cps = decode_utf8(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && python_space(cps[i].cp)) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(python_strip(s.substr(cps[i].offset), Value(nullptr), false, true));
        break;
      }
      while (j < cps.size() && !python_space(cps[j].cp)) ++j;
      const size_t end = j < cps.size() ? cps[j].offset : s.size();
      out.push_back(s.substr(cps[i].offset, end - cps[i].offset));
      i = j;
    }
    return out;
  }
  const std::string& d = need_string(sep, ".split()", where);
  if (d.empty()) builtin_fail(where, ".split() with an empty separator");
  size_t pos = 0;
  for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) && (hit = s.find(d, pos)) != std::string::npos;) {
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

// Jinja iterates a mapping's keys, a string's characters, a list's items.
Value as_list(const Value& v, const std::string& where) {
  if (v.is_array()) return v;
  Value out = Value::array();
  if (v.is_discarded()) return out;
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
    return out;
  }
  if (v.is_string()) {
    for (std::string& c : code_points(v.get<std::string>())) out.push_back(std::move(c));
    return out;
  }
  builtin_fail(where, cat("iterating over ", kind_name(v), " (lists, mappings and strings are iterable)"));
}

Value attribute_of(const Value& v, const std::string& attr) {
  if (!v.is_object()) return undefined();
  auto it = v.find(attr);
  return it == v.end() ? undefined() : *it;
}

int64_t length_of(const Value& v, const std::string& where) {
  if (v.is_string()) return static_cast<int64_t>(code_points(v.get<std::string>()).size());
  if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.size());
  if (v.is_discarded()) return 0;
  builtin_fail(where, cat("length of ", kind_name(v)));
}

// select / reject / selectattr / rejectattr: `args` hold [attribute,] [test name, test arguments…].
Value select_items(const Value& v, const Args& args, bool by_attr, bool keep, const std::string& where) {
  size_t first = 0;
  std::string attr;
  if (by_attr) attr = need_string(args.get(first++, "attribute", undefined()), "selectattr's attribute", where);
  Args test_args;
  std::string test;
  if (first < args.positional.size()) test = need_string(args.positional[first++], "a test name", where);
  if (!test.empty() && !known_test(test)) builtin_fail(where, cat("the test '", test, "' is not supported"));
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(first, args.positional.size())), args.positional.end());
  Value out = Value::array();
  for (const Value& item : as_list(v, where)) {
    const Value subject = by_attr ? attribute_of(item, attr) : item;
    const bool pass = test.empty() ? truthy(subject) : apply_test(test, subject, test_args, where);
    if (pass == keep) out.push_back(item);
  }
  return out;
}

Value map_items(const Value& v, const Args& args, const std::string& where) {
  Value out = Value::array();
  const Value& attr = args.get(99, "attribute", undefined());
  if (!attr.is_discarded()) {
    const Value& dflt = args.get(99, "default", undefined());
    for (const Value& item : as_list(v, where)) {
      Value a = attribute_of(item, need_string(attr, "map's attribute", where));
      out.push_back(a.is_discarded() ? dflt : a);
    }
    return out;
  }
  if (args.positional.empty()) builtin_fail(where, "map needs a filter name or attribute=");
  const std::string& f = need_string(args.positional[0], "map's filter", where);
  if (!known_filter(f)) builtin_fail(where, cat("the filter '", f, "' is not supported"));
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.named = args.named;
  for (const Value& item : as_list(v, where)) out.push_back(apply_filter(f, item, rest, where));
  return out;
}

Value join_items(const Value& v, const Args& args, const std::string& where) {
  const std::string sep = to_output(args.get(0, "d", Value("")), where);
  const Value& attr = args.get(1, "attribute", undefined());
  std::string out;
  bool first = true;
  for (const Value& item : as_list(v, where)) {
    if (!first) out += sep;
    first = false;
    out += to_output(attr.is_discarded() ? item : attribute_of(item, need_string(attr, "join's attribute", where)), where);
  }
  return out;
}

Value items_of(const Value& v, const std::string& where) {
  Value out = Value::array();
  if (v.is_discarded()) return out;
  if (!v.is_object()) builtin_fail(where, cat("items of ", kind_name(v), " (a mapping is needed)"));
  for (auto it = v.begin(); it != v.end(); ++it) out.push_back(Value::array({it.key(), it.value()}));
  return out;
}

Value to_int(const Value& v, const Args& args) {
  if (v.is_number_integer()) return v;
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = python_strip(v.get<std::string>(), Value(nullptr), true, true);
      const int64_t n = std::stoll(s, &used, 10);
      if (used == s.size()) return n;
    } catch (const std::exception&) {
    }
  }
  return args.get(0, "default", Value(0));
}

Value tojson_of(const Value& v, const Args& args, const std::string& where) {
  const Value& indent = args.get(99, "indent", Value(nullptr));
  if (!args.get(99, "separators", Value(nullptr)).is_null()) builtin_fail(where, "uses tojson(separators=…), which is not supported");
  if (args.get(99, "ensure_ascii", Value(false)) != Value(false)) builtin_fail(where, "uses tojson(ensure_ascii=true), which is not supported");
  std::optional<int> ind;
  if (!indent.is_null()) ind = static_cast<int>(need_int(indent, "tojson's indent", where));
  return python_json(v, ind, truthy(args.get(99, "sort_keys", Value(false))), where);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"trim", [](const Value& v, const Args& a, const std::string& w) { return Value(python_strip(need_string(v, "trim", w), a.get(0, "chars", Value(nullptr)), true, true)); }},
      {"length", [](const Value& v, const Args&, const std::string& w) { return Value(length_of(v, w)); }},
      {"count", [](const Value& v, const Args&, const std::string& w) { return Value(length_of(v, w)); }},
      {"lower", [](const Value& v, const Args&, const std::string& w) { return Value(ascii_cased(need_string(v, "lower", w), 0)); }},
      {"upper", [](const Value& v, const Args&, const std::string& w) { return Value(ascii_cased(need_string(v, "upper", w), 1)); }},
      {"capitalize", [](const Value& v, const Args&, const std::string& w) { return Value(capitalized(need_string(v, "capitalize", w))); }},
      {"title", [](const Value& v, const Args&, const std::string& w) { return Value(titled(need_string(v, "title", w))); }},
      {"string", [](const Value& v, const Args&, const std::string& w) { return v.is_string() ? v : Value(to_output(v, w)); }},
      {"safe", [](const Value& v, const Args&, const std::string&) { return v; }},
      {"int", [](const Value& v, const Args& a, const std::string&) { return to_int(v, a); }},
      {"abs", [](const Value& v, const Args&, const std::string& w) { return Value(std::abs(need_int(v, "abs", w))); }},
      {"first", [](const Value& v, const Args&, const std::string& w) { Value l = as_list(v, w); return l.empty() ? undefined() : l.front(); }},
      {"last", [](const Value& v, const Args&, const std::string& w) { Value l = as_list(v, w); return l.empty() ? undefined() : l.back(); }},
      {"list", [](const Value& v, const Args&, const std::string& w) { return as_list(v, w); }},
      {"items", [](const Value& v, const Args&, const std::string& w) { return items_of(v, w); }},
      {"join", join_items},
      {"map", map_items},
      {"tojson", tojson_of},
      {"default", [](const Value& v, const Args& a, const std::string&) {
         const bool boolean = truthy(a.get(1, "boolean", Value(false)));
         return (v.is_discarded() || (boolean && !truthy(v))) ? a.get(0, "default_value", Value("")) : v;
       }},
      {"replace", [](const Value& v, const Args& a, const std::string& w) {
         return Value(replaced(need_string(v, "replace", w), need_string(a.get(0, "old", undefined()), "replace", w),
                               need_string(a.get(1, "new", undefined()), "replace", w), need_int(a.get(2, "count", Value(-1)), "replace", w), w));
       }},
      {"select", [](const Value& v, const Args& a, const std::string& w) { return select_items(v, a, false, true, w); }},
      {"reject", [](const Value& v, const Args& a, const std::string& w) { return select_items(v, a, false, false, w); }},
      {"selectattr", [](const Value& v, const Args& a, const std::string& w) { return select_items(v, a, true, true, w); }},
      {"rejectattr", [](const Value& v, const Args& a, const std::string& w) { return select_items(v, a, true, false, w); }},
  };
  return table;
}

bool is_lower(const std::string& s, bool upper) {
  bool cased = false;
  for (char c : s) {
    if (!std::isalpha(static_cast<unsigned char>(c))) continue;
    cased = true;
    if ((std::isupper(static_cast<unsigned char>(c)) != 0) != upper) return false;
  }
  return cased;
}

const std::map<std::string, Test>& tests() {
  static const auto arg = [](const Args& a) -> Value { return a.get(0, "other", undefined()); };
  static const Test eq = [](const Value& v, const Args& a, const std::string&) { return v == arg(a); };
  static const Test ne = [](const Value& v, const Args& a, const std::string&) { return v != arg(a); };
  static const std::map<std::string, Test> table = {
      {"defined", [](const Value& v, const Args&, const std::string&) { return !v.is_discarded(); }},
      {"undefined", [](const Value& v, const Args&, const std::string&) { return v.is_discarded(); }},
      {"none", [](const Value& v, const Args&, const std::string&) { return v.is_null(); }},
      {"string", [](const Value& v, const Args&, const std::string&) { return v.is_string(); }},
      {"number", [](const Value& v, const Args&, const std::string&) { return v.is_number() || v.is_boolean(); }},
      {"integer", [](const Value& v, const Args&, const std::string&) { return v.is_number_integer(); }},
      {"float", [](const Value& v, const Args&, const std::string&) { return v.is_number_float(); }},
      {"boolean", [](const Value& v, const Args&, const std::string&) { return v.is_boolean(); }},
      {"true", [](const Value& v, const Args&, const std::string&) { return v.is_boolean() && v.get<bool>(); }},
      {"false", [](const Value& v, const Args&, const std::string&) { return v.is_boolean() && !v.get<bool>(); }},
      {"mapping", [](const Value& v, const Args&, const std::string&) { return v.is_object(); }},
      // Jinja's Undefined can be iterated (it is empty); None cannot.
      {"iterable", [](const Value& v, const Args&, const std::string&) { return v.is_array() || v.is_object() || v.is_string() || v.is_discarded(); }},
      {"sequence", [](const Value& v, const Args&, const std::string&) { return v.is_array() || v.is_object() || v.is_string(); }},
      {"equalto", eq}, {"eq", eq}, {"==", eq}, {"sameas", eq}, {"ne", ne}, {"!=", ne},
      {"odd", [](const Value& v, const Args&, const std::string& w) { return need_int(v, "odd", w) % 2 != 0; }},
      {"even", [](const Value& v, const Args&, const std::string& w) { return need_int(v, "even", w) % 2 == 0; }},
      {"divisibleby", [](const Value& v, const Args& a, const std::string& w) {
         const int64_t d = need_int(arg(a), "divisibleby", w);
         if (d == 0) builtin_fail(w, "divisibleby 0");
         return need_int(v, "divisibleby", w) % d == 0;
       }},
      {"in", [](const Value& v, const Args& a, const std::string&) {
         const Value& hay = arg(a);
         if (hay.is_array()) return std::find(hay.begin(), hay.end(), v) != hay.end();
         if (hay.is_object()) return v.is_string() && hay.contains(v.get<std::string>());
         return hay.is_string() && v.is_string() && hay.get<std::string>().find(v.get<std::string>()) != std::string::npos;
       }},
      {"lower", [](const Value& v, const Args&, const std::string&) { return v.is_string() && is_lower(v.get<std::string>(), false); }},
      {"upper", [](const Value& v, const Args&, const std::string&) { return v.is_string() && is_lower(v.get<std::string>(), true); }},
  };
  return table;
}

bool affix(const std::string& s, const Value& p, bool start, const std::string& where) {
  const std::string& a = need_string(p, start ? ".startswith()" : ".endswith()", where);
  return start ? s.rfind(a, 0) == 0 : (s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0);
}

const std::map<std::string, Method>& string_methods() {
  static const auto self_str = [](const Value& v, const std::string& w) -> const std::string& { return need_string(v, "a string method", w); };
  static const std::map<std::string, Method> table = {
      {"strip", [](const Value& v, const Args& a, const std::string& w) { return Value(python_strip(self_str(v, w), a.get(0, "chars", Value(nullptr)), true, true)); }},
      {"lstrip", [](const Value& v, const Args& a, const std::string& w) { return Value(python_strip(self_str(v, w), a.get(0, "chars", Value(nullptr)), true, false)); }},
      {"rstrip", [](const Value& v, const Args& a, const std::string& w) { return Value(python_strip(self_str(v, w), a.get(0, "chars", Value(nullptr)), false, true)); }},
      {"lower", [](const Value& v, const Args&, const std::string& w) { return Value(ascii_cased(self_str(v, w), 0)); }},
      {"upper", [](const Value& v, const Args&, const std::string& w) { return Value(ascii_cased(self_str(v, w), 1)); }},
      {"title", [](const Value& v, const Args&, const std::string& w) { return Value(titled(self_str(v, w))); }},
      {"capitalize", [](const Value& v, const Args&, const std::string& w) { return Value(capitalized(self_str(v, w))); }},
      {"startswith", [](const Value& v, const Args& a, const std::string& w) { return Value(affix(self_str(v, w), a.get(0, "prefix", undefined()), true, w)); }},
      {"endswith", [](const Value& v, const Args& a, const std::string& w) { return Value(affix(self_str(v, w), a.get(0, "suffix", undefined()), false, w)); }},
      {"split", [](const Value& v, const Args& a, const std::string& w) {
         return split_string(self_str(v, w), a.get(0, "sep", Value(nullptr)), need_int(a.get(1, "maxsplit", Value(-1)), ".split()", w), w);
       }},
      {"replace", [](const Value& v, const Args& a, const std::string& w) {
         return Value(replaced(self_str(v, w), need_string(a.get(0, "old", undefined()), ".replace()", w),
                               need_string(a.get(1, "new", undefined()), ".replace()", w), need_int(a.get(2, "count", Value(-1)), ".replace()", w), w));
       }},
      {"find", [](const Value& v, const Args& a, const std::string& w) {
         const std::string& s = self_str(v, w);
         const size_t at = s.find(need_string(a.get(0, "sub", undefined()), ".find()", w));
         return at == std::string::npos ? Value(-1) : Value(static_cast<int64_t>(code_points(s.substr(0, at)).size()));
       }},
      {"count", [](const Value& v, const Args& a, const std::string& w) {
         const std::string& s = self_str(v, w);
         const std::string sub = need_string(a.get(0, "sub", undefined()), ".count()", w);
         int64_t n = 0;
         if (sub.empty()) return Value(static_cast<int64_t>(code_points(s).size()) + 1);
         for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
         return Value(n);
       }},
      {"join", [](const Value& v, const Args& a, const std::string& w) {
         Args j;
         j.positional = {v};
         return join_items(a.get(0, "iterable", undefined()), j, w);
       }},
  };
  return table;
}

const std::map<std::string, Method>& mapping_methods() {
  static const std::map<std::string, Method> table = {
      {"items", [](const Value& v, const Args&, const std::string& w) { return items_of(v, w); }},
      {"keys", [](const Value& v, const Args&, const std::string& w) { return as_list(v, w); }},
      {"values", [](const Value& v, const Args&, const std::string&) {
         Value out = Value::array();
         for (const Value& x : v) out.push_back(x);
         return out;
       }},
      {"get", [](const Value& v, const Args& a, const std::string& w) {
         Value got = attribute_of(v, need_string(a.get(0, "key", undefined()), ".get()", w));
         return got.is_discarded() ? a.get(1, "default", Value(nullptr)) : got;
       }},
  };
  return table;
}

Value strftime_now(const Value& format, const std::string& where) {
  const std::string& f = need_string(format, "strftime_now()", where);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256 + f.size() * 8, '\0');
  out.resize(std::strftime(out.data(), out.size(), f.c_str(), &local));
  return out;
}

Value range_of(const Args& a, const std::string& where) {
  int64_t lo = 0, hi = 0, step = 1;
  const size_t n = a.positional.size();
  if (n == 1) hi = need_int(a.positional[0], "range()", where);
  if (n >= 2) lo = need_int(a.positional[0], "range()", where), hi = need_int(a.positional[1], "range()", where);
  if (n == 3) step = need_int(a.positional[2], "range()", where);
  if (n == 0 || n > 3 || step == 0) builtin_fail(where, "range() takes 1 to 3 integers, the step not 0");
  Value out = Value::array();
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
    if (out.size() >= 100000) builtin_fail(where, "range() longer than 100000");
    out.push_back(i);
  }
  return out;
}

}  // namespace

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (const CodePoint& c : decode_utf8(s)) out.push_back(s.substr(c.offset, c.size));
  return out;
}

std::string python_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const auto cps = decode_utf8(s);
  std::vector<char32_t> set;
  const bool by_space = chars.is_null() || chars.is_discarded();
  if (!by_space) {
    if (!chars.is_string()) throw UserError(cat("strip: the characters must be a string, got ", kind_name(chars)));
    for (const CodePoint& c : decode_utf8(chars.get<std::string>())) set.push_back(c.cp);
  }
  const auto stripped = [&](char32_t cp) { return by_space ? python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end(); };
  size_t lo = 0, hi = cps.size();
  if (left) while (lo < hi && stripped(cps[lo].cp)) ++lo;
  if (right) while (hi > lo && stripped(cps[hi - 1].cp)) --hi;
  if (lo == hi) return "";
  const size_t begin = cps[lo].offset, end = cps[hi - 1].offset + cps[hi - 1].size;
  return s.substr(begin, end - begin);
}

bool known_filter(const std::string& name) { return filters().count(name) || name == "d"; }
bool known_test(const std::string& name) { return tests().count(name) > 0; }
bool known_method(const std::string& name) { return string_methods().count(name) || mapping_methods().count(name); }
bool known_function(const std::string& name) {
  for (const char* f : {"raise_exception", "namespace", "strftime_now", "range", "dict"})
    if (name == f) return true;
  return false;
}

Value apply_filter(const std::string& name, const Value& v, const Args& args, const std::string& where) {
  return filters().at(name == "d" ? "default" : name)(v, args, where);
}

bool apply_test(const std::string& name, const Value& v, const Args& args, const std::string& where) {
  return tests().at(name)(v, args, where);
}

Value call_method(const std::string& name, const Value& self, const Args& args, const std::string& where) {
  const auto& table = self.is_object() ? mapping_methods() : string_methods();
  auto it = table.find(name);
  if (it == table.end()) builtin_fail(where, cat("the method '.", name, "()' on ", kind_name(self)));
  return it->second(self, args, where);
}

Value call_function(const std::string& name, const Args& args, const std::string& where) {
  if (name == "raise_exception")
    builtin_fail(where, cat("the template raised: ", args.positional.empty() ? std::string() : to_output(args.positional[0], where)));
  if (name == "strftime_now") return strftime_now(args.get(0, "format", undefined()), where);
  if (name == "range") return range_of(args, where);
  // namespace() and dict(): a mapping of the keyword arguments (after a mapping given positionally).
  Value out = Value::object();
  if (!args.positional.empty()) {
    if (args.positional.size() > 1 || !args.positional[0].is_object()) builtin_fail(where, cat(name, "() takes one mapping and keyword arguments"));
    out = args.positional[0];
  }
  for (const auto& [k, v] : args.named) out[k] = v;
  return out;
}

}  // namespace meshtrain::text::jinja
