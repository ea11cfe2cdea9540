#include "jinja_template.h"

#include <map>

#include "jinja_builtins.h"
#include "meshtrain/core/error.h"

namespace meshtrain::text::jinja {

using NodeList = std::vector<std::unique_ptr<Template::Node>>;

struct Template::Node {
  // SetAttr: `set ns.attr = …` (a namespace's attribute); SetBlock: `{% set x %}…{% endset %}`;
  // Generation: transformers' `{% generation %}…{% endgeneration %}`, which renders its body (the markers
  // only matter when transformers is asked for the assistant-token mask, which inference never is).
  enum class Kind { Text, Output, If, For, Set, SetAttr, SetBlock, Generation } kind;
  std::string text;                                      // Text: the text; Set / SetAttr / SetBlock: the variable
  std::string attr;                                      // SetAttr: the attribute
  std::vector<std::string> targets;                      // For: the loop variable(s) (`for k, v in …` unpacks)
  ExprPtr expr;                                          // Output / For (the iterable) / Set / SetAttr
  ExprPtr filter;                                        // For: `for x in xs if cond` (nullptr: none)
  std::vector<std::pair<ExprPtr, NodeList>> branches;    // If: (condition, body) for if and each elif
  NodeList body, else_body;                              // For: body and else; If: else; SetBlock / Generation: body
};

namespace {

// A tag or a stretch of text, after the whitespace controls.
struct Item {
  enum class Kind { Text, Output, Block } kind;
  std::string text;
};

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Where the tag opened at `open` (its content starting at `from`) closes; quotes are skipped.
size_t tag_end(std::string_view src, size_t from, std::string_view closer, const std::string& where) {
  char quote = 0;
  for (size_t i = from; i + 1 < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (src.compare(i, closer.size(), closer) == 0) {
      return i;
    }
  }
  throw UserError(cat(where, ": a tag is not closed with '", closer, "'"));
}

std::vector<Item> lex_template(std::string_view src, const std::string& where) {
  std::vector<Item> items;
  size_t pos = 0;
  bool strip_next = false;  // the previous tag ended with '-'
  for (;;) {
    size_t k = src.find('{', pos);
    while (k != std::string_view::npos && (k + 1 >= src.size() || (src[k + 1] != '{' && src[k + 1] != '%' && src[k + 1] != '#')))
      k = src.find('{', k + 1);
    std::string text(src.substr(pos, k == std::string_view::npos ? std::string_view::npos : k - pos));
    if (strip_next) text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\v\f")));
    if (k == std::string_view::npos) {
      if (!text.empty()) items.push_back({Item::Kind::Text, text});
      return items;
    }
    const char kind = src[k + 1];
    size_t inner = k + 2;
    const bool minus = inner < src.size() && src[inner] == '-', plus = inner < src.size() && src[inner] == '+';
    if (minus || plus) ++inner;
    if (minus) {
      while (!text.empty() && is_ws(text.back())) text.pop_back();
    } else if (kind != '{' && !plus) {  // lstrip_blocks: spaces and tabs from the start of the line
      size_t n = 0;  // spaces and tabs ending the text (what is left of it after an earlier '-')
      while (n < text.size() && (text[text.size() - 1 - n] == ' ' || text[text.size() - 1 - n] == '\t')) ++n;
      if (k == n || src[k - n - 1] == '\n') text.resize(text.size() - n);
    }
    if (!text.empty()) items.push_back({Item::Kind::Text, text});
    const std::string_view closer = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = kind == '#' ? src.find(closer, inner) : tag_end(src, inner, closer, where);
    MT_USER_CHECK(end != std::string_view::npos, where, ": a comment is not closed with '#}'");
    std::string content(src.substr(inner, end - inner));
    strip_next = !content.empty() && content.back() == '-';
    if (strip_next) content.pop_back();
    if (kind != '#') items.push_back({kind == '{' ? Item::Kind::Output : Item::Kind::Block, content});
    pos = end + 2;
    if (!strip_next && kind != '{') {  // trim_blocks: the newline after a block tag
      if (src.compare(pos, 1, "\n") == 0) pos += 1;
      else if (src.compare(pos, 2, "\r\n") == 0) pos += 2;
    }
  }
}

class Parser {
 public:
  Parser(std::vector<Item> items, const std::string& where) : items_(std::move(items)), where_(where) {}

  NodeList parse_all() {
    std::string end;
    NodeList body = parse_body({}, end);
    return body;
  }

 private:
  // Nodes up to one of the `stops` keywords (consumed; its name in `stop`, its parser left in `last_`).
  NodeList parse_body(const std::vector<std::string>& stops, std::string& stop) {
    NodeList out;
    while (pos_ < items_.size()) {
      const Item& it = items_[pos_++];
      if (it.kind == Item::Kind::Text) {
        out.push_back(text_node(it.text));
        continue;
      }
      ExprParser p(lex_expression(it.text, where_), where_);
      if (it.kind == Item::Kind::Output) {
        auto n = std::make_unique<Template::Node>();
        n->kind = Template::Node::Kind::Output;
        n->expr = p.expression();
        finish(p);
        out.push_back(std::move(n));
        continue;
      }
      MT_USER_CHECK(!p.at_end(), where_, ": an empty {% %} tag");
      const std::string kw = p.name();
      if (std::find(stops.begin(), stops.end(), kw) != stops.end()) {
        stop = kw;
        last_ = std::make_unique<ExprParser>(std::move(p));
        return out;
      }
      if (kw == "if") out.push_back(parse_if(p));
      else if (kw == "for") out.push_back(parse_for(p));
      else if (kw == "set") out.push_back(parse_set(p));
      else if (kw == "generation") out.push_back(parse_generation(p));
      else p.unsupported("the statement '{% " + kw + " %}'" + (kw.rfind("end", 0) == 0 || kw == "else" || kw == "elif" ? " here (unbalanced)" : ""));
    }
    MT_USER_CHECK(stops.empty(), where_, ": the template ends inside a block (expected {% ", stops.back(), " %})");
    return out;
  }

  static std::unique_ptr<Template::Node> text_node(std::string text) {
    auto n = std::make_unique<Template::Node>();
    n->kind = Template::Node::Kind::Text;
    n->text = std::move(text);
    return n;
  }

  void finish(ExprParser& p) const {
    MT_USER_CHECK(p.at_end(), where_, ": unexpected '", p.peek().text, "' in a tag");
  }

  std::unique_ptr<Template::Node> parse_if(ExprParser& p) {
    auto n = std::make_unique<Template::Node>();
    n->kind = Template::Node::Kind::If;
    ExprPtr cond = p.expression();
    finish(p);
    for (;;) {
      std::string stop;
      NodeList body = parse_body({"elif", "else", "endif"}, stop);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (stop == "endif") break;
      if (stop == "else") {
        finish(*last_);
        n->else_body = parse_body({"endif"}, stop);
        break;
      }
      cond = last_->expression();
      finish(*last_);
    }
    finish(*last_);
    return n;
  }

  std::unique_ptr<Template::Node> parse_for(ExprParser& p) {
    auto n = std::make_unique<Template::Node>();
    n->kind = Template::Node::Kind::For;
    do n->targets.push_back(p.name());
    while (p.accept(","));
    p.expect("in");
    n->expr = p.iterable();
    if (p.accept("if")) n->filter = p.iterable();
    if (p.peek().text == "recursive") p.unsupported("a recursive loop");
    finish(p);
    std::string stop;
    n->body = parse_body({"else", "endfor"}, stop);
    if (stop == "else") {
      finish(*last_);
      n->else_body = parse_body({"endfor"}, stop);
    }
    finish(*last_);
    return n;
  }

  std::unique_ptr<Template::Node> parse_set(ExprParser& p) {
    auto n = std::make_unique<Template::Node>();
    n->kind = Template::Node::Kind::Set;
    n->text = p.name();
    if (p.accept(".")) {
      n->kind = Template::Node::Kind::SetAttr;
      n->attr = p.name();
    }
    if (p.peek().text == ",") p.unsupported("unpacking in set ('set a, b = …')");
    if (p.at_end() && n->kind == Template::Node::Kind::Set) {
      n->kind = Template::Node::Kind::SetBlock;
      std::string stop;
      n->body = parse_body({"endset"}, stop);
      finish(*last_);
      return n;
    }
    p.expect("=");
    n->expr = p.expression();
    finish(p);
    return n;
  }

  std::unique_ptr<Template::Node> parse_generation(ExprParser& p) {
    auto n = std::make_unique<Template::Node>();
    n->kind = Template::Node::Kind::Generation;
    finish(p);
    std::string stop;
    n->body = parse_body({"endgeneration"}, stop);
    finish(*last_);
    return n;
  }

  std::vector<Item> items_;
  size_t pos_ = 0;
  const std::string& where_;
  std::unique_ptr<ExprParser> last_;  // the parser of the tag that ended the last body
};

// The variables while rendering: the globals, then one frame per enclosing loop iteration.
class Frames : public Scope {
 public:
  explicit Frames(const Value& globals) { frames_.push_back(globals.is_object() ? globals : Value::object()); }
  Value lookup(const std::string& name) const override {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return *f;
    return undefined();
  }
  void set(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }
  // `set ns.attr = v`: the namespace is changed where it was made, so the change outlives a loop iteration.
  void set_attr(const std::string& name, const std::string& attr, Value v, const std::string& where) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) {
        MT_USER_CHECK(f->is_object(), where, ": 'set ", name, ".", attr, "' on a ", f->type_name(),
                      " (only a namespace() takes attributes)");
        (*f)[attr] = std::move(v);
        return;
      }
    MT_USER_CHECK(false, where, ": 'set ", name, ".", attr, "' but '", name, "' is not defined");
  }
  void push() { frames_.push_back(Value::object()); }
  void pop() { frames_.pop_back(); }

 private:
  std::vector<Value> frames_;
};

void render_nodes(const NodeList& nodes, Frames& frames, std::string& out, const std::string& where);

// What a for loop walks: a list's items, a mapping's keys, a string's characters; undefined and none are
// empty (none, which Jinja would refuse, as before).
Value loop_items(const Value& v, const std::string& where) {
  if (v.is_array() || is_undefined(v) || v.is_null()) return v.is_array() ? v : Value::array();
  MT_USER_CHECK(v.is_object() || v.is_string(), where, ": a for loop over ", v.type_name());
  return apply_filter("list", v, Args{}, where);
}

void bind_targets(const Template::Node& n, const Value& item, Frames& frames, const std::string& where) {
  if (n.targets.size() == 1) {
    frames.set(n.targets[0], item);
    return;
  }
  MT_USER_CHECK(item.is_array() && item.size() == n.targets.size(), where, ": 'for ", n.targets[0],
                ", … in' unpacks ", n.targets.size(), " values but an item has ",
                item.is_array() ? std::to_string(item.size()) : std::string("none (not a list)"));
  for (size_t k = 0; k < n.targets.size(); ++k) frames.set(n.targets[k], item[k]);
}

void render_for(const Template::Node& n, Frames& frames, std::string& out, const std::string& where) {
  Value items = loop_items(evaluate(*n.expr, frames, where), where);
  if (n.filter) {  // `for x in xs if cond`: the loop (and loop.length) sees only the items that pass
    Value kept = Value::array();
    for (const Value& item : items) {
      frames.push();
      bind_targets(n, item, frames, where);
      if (truthy(evaluate(*n.filter, frames, where))) kept.push_back(item);
      frames.pop();
    }
    items = std::move(kept);
  }
  const size_t len = items.size();
  if (len == 0) {
    render_nodes(n.else_body, frames, out, where);
    return;
  }
  for (size_t i = 0; i < len; ++i) {
    frames.push();  // Jinja: names set inside a loop body do not outlive the iteration
    const auto ii = static_cast<int64_t>(i), nn = static_cast<int64_t>(len);
    frames.set("loop", {{"index", ii + 1}, {"index0", ii}, {"first", i == 0}, {"last", i + 1 == len},
                        {"length", nn}, {"revindex", nn - ii}, {"revindex0", nn - ii - 1},
                        {"previtem", i > 0 ? items[i - 1] : undefined()},
                        {"nextitem", i + 1 < len ? items[i + 1] : undefined()}});
    bind_targets(n, items[i], frames, where);
    render_nodes(n.body, frames, out, where);
    frames.pop();
  }
}

void render_if(const Template::Node& n, Frames& frames, std::string& out, const std::string& where) {
  const NodeList* chosen = &n.else_body;
  for (const auto& [cond, body] : n.branches)
    if (truthy(evaluate(*cond, frames, where))) {
      chosen = &body;
      break;
    }
  render_nodes(*chosen, frames, out, where);
}

void render_nodes(const NodeList& nodes, Frames& frames, std::string& out, const std::string& where) {
  for (const auto& n : nodes) {
    switch (n->kind) {
      case Template::Node::Kind::Text: out += n->text; break;
      case Template::Node::Kind::Output: out += to_output(evaluate(*n->expr, frames, where), where); break;
      case Template::Node::Kind::Set: frames.set(n->text, evaluate(*n->expr, frames, where)); break;
      case Template::Node::Kind::SetAttr: frames.set_attr(n->text, n->attr, evaluate(*n->expr, frames, where), where); break;
      case Template::Node::Kind::SetBlock: {
        std::string captured;
        render_nodes(n->body, frames, captured, where);
        frames.set(n->text, captured);
        break;
      }
      case Template::Node::Kind::Generation:  // a call block in Jinja: its body has a scope of its own
        frames.push();
        render_nodes(n->body, frames, out, where);
        frames.pop();
        break;
      case Template::Node::Kind::For: render_for(*n, frames, out, where); break;
      case Template::Node::Kind::If: render_if(*n, frames, out, where); break;
    }
  }
}

}  // namespace

Template::Template(std::string_view source, std::string where) : where_(std::move(where)) {
  body_ = Parser(lex_template(source, where_), where_).parse_all();
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& variables) const {
  Frames frames(variables);
  std::string out;
  render_nodes(body_, frames, out, where_);
  return out;
}

}  // namespace meshtrain::text::jinja
