// The filters, tests, string/mapping methods and global functions of the Jinja subset chat templates use
// (private to the text room), with the behaviour of Jinja 2/3 under transformers' environment (its `tojson`,
// `raise_exception`, `strftime_now`, `namespace`). The parser asks `known_*` so that a name outside the subset
// is refused when the template is read; the evaluator calls `apply_*` with the evaluated arguments.
//
//   filters:   trim length count lower upper capitalize title string int abs first last join list items
//              default (d) replace tojson select reject selectattr rejectattr map safe
//   tests:     defined undefined none string number integer float boolean true false mapping iterable
//              sequence equalto eq == ne != sameas odd even divisibleby in lower upper
//   methods:   strip lstrip rstrip lower upper title capitalize startswith endswith split replace find
//              count join (strings); items keys values get (mappings)
//   functions: raise_exception namespace strftime_now range dict
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "jinja_expression.h"

namespace meshtrain::text::jinja {

// Evaluated arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // Argument `i` (or keyword `name`), or `fallback` when neither is given (a copy: the fallback is often a
  // temporary).
  Value get(size_t i, const char* name, const Value& fallback) const;
};

bool known_filter(const std::string& name);
bool known_test(const std::string& name);
bool known_method(const std::string& name);
bool known_function(const std::string& name);

Value apply_filter(const std::string& name, const Value& v, const Args& args, const std::string& where);
bool apply_test(const std::string& name, const Value& v, const Args& args, const std::string& where);
Value call_method(const std::string& name, const Value& self, const Args& args, const std::string& where);
Value call_function(const std::string& name, const Args& args, const std::string& where);

// Python's str.strip family over code points: `chars` (all of them removed from the ends), or white space
// as str.isspace() knows it when `chars` is undefined or none.
std::string python_strip(const std::string& s, const Value& chars, bool left, bool right);
// Code points of a UTF-8 string, each as its own string (Python's view of str for len, [i] and slices).
std::vector<std::string> code_points(const std::string& s);

}  // namespace meshtrain::text::jinja
