#include "python_json.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::text::jinja {

namespace {

struct PythonJsonWriter {
  std::optional<int> indent;
  bool sort_keys;
  const std::string& where;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(*indent * level), ' ');
  }

  void scalar(const Value& v) {
    MT_USER_CHECK(!v.is_discarded(), where, ": tojson of an undefined value");
    // nlohmann escapes as Python does with ensure_ascii=False: \" \\ \n \r \t \b \f and \u00XX for the other
    // control characters, everything else (non-ASCII included) as it is.
    out += v.dump(-1, ' ', false, Value::error_handler_t::replace);
  }

  // `items`: (key or nullptr, value) in the order written.
  template <typename Items>
  void container(char open, char close, const Items& items, int level) {
    out += open;
    if (items.empty()) {
      out += close;
      return;
    }
    bool first = true;
    for (const auto& [key, value] : items) {
      if (!first) out += indent ? "," : ", ";
      first = false;
      if (indent) newline(level + 1);
      if (key) {
        scalar(Value(*key));
        out += ": ";
      }
      write(*value, level + 1);
    }
    if (indent) newline(level);
    out += close;
  }

  void write(const Value& v, int level) {
    if (v.is_array()) {
      std::vector<std::pair<const std::string*, const Value*>> items;
      for (const Value& x : v) items.emplace_back(nullptr, &x);
      container('[', ']', items, level);
    } else if (v.is_object()) {
      std::vector<std::pair<const std::string*, const Value*>> items;
      for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(&it.key(), &it.value());
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
      container('{', '}', items, level);
    } else {
      scalar(v);
    }
  }
};

}  // namespace

std::string python_json(const Value& v, std::optional<int> indent, bool sort_keys, const std::string& where) {
  PythonJsonWriter w{indent, sort_keys, where, {}};
  w.write(v, 0);
  return w.out;
}

}  // namespace meshtrain::text::jinja
