// The statement layer of the Jinja subset chat templates use (private to the text room): text, {{ expr }},
// {% if/elif/else/endif %}, {% for x in xs [if cond] %}…{% else %}…{% endfor %} (with `for k, v in …`
// unpacking and loop.index/index0/first/last/length/revindex/revindex0/previtem/nextitem),
// {% set name = expr %}, {% set ns.attr = expr %} (namespace()), {% set name %}…{% endset %},
// transformers' {% generation %}…{% endgeneration %} (its body rendered), {# comments #}, the `-` whitespace
// controls, and the trim_blocks + lstrip_blocks settings that transformers' apply_chat_template renders
// with. A statement or expression outside the subset (macro, call block, include, break/continue, a
// filter not in jinja_builtins.h, …) is a UserError naming it, raised when the template is parsed, not
// halfway through rendering.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jinja_expression.h"

namespace meshtrain::text::jinja {

class Template {
 public:
  // Parses `source`; `where` names the template in errors.
  Template(std::string_view source, std::string where);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `variables` (a JSON object) as the global names.
  std::string render(const Value& variables) const;

  struct Node;

 private:
  std::vector<std::unique_ptr<Node>> body_;
  std::string where_;
};

}  // namespace meshtrain::text::jinja
