#include "jinja_expression.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "jinja_builtins.h"
#include "meshtrain/core/error.h"

namespace meshtrain::text::jinja {

namespace {

ExprPtr node(Expr::Kind k, std::string text = {}, std::vector<ExprPtr> args = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->text = std::move(text);
  e->args = std::move(args);
  return e;
}

template <typename... E>
std::vector<ExprPtr> list(E&&... e) {
  std::vector<ExprPtr> v;
  (v.push_back(std::forward<E>(e)), ...);
  return v;
}

const char* kOps3[] = {"//"};
const char* kOps2[] = {"==", "!=", "<=", ">="};
const std::string kOps1 = "+-*/%~|.,:()[]{}<>=";

}  // namespace

Value undefined() { return Value(Value::value_t::discarded); }
bool is_undefined(const Value& v) { return v.is_discarded(); }

bool truthy(const Value& v) {
  if (v.is_discarded() || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

std::string to_output(const Value& v, const std::string& where) {
  if (v.is_discarded()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_number_integer() || v.is_number_unsigned()) return std::to_string(v.get<int64_t>());
  MT_USER_CHECK(!v.is_number_float() || v.get<double>() == std::floor(v.get<double>()), where,
                ": printing a fractional number is not supported");
  MT_USER_CHECK(!v.is_number_float(), where, ": printing a float is not supported");
  MT_USER_CHECK(false, where, ": printing a list or mapping is not supported (it would need Python's repr)");
  return "";
}

std::vector<Token> lex_expression(std::string_view s, const std::string& where) {
  std::vector<Token> out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::Name, std::string(s.substr(i, j - i))});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      MT_USER_CHECK(j >= s.size() || s[j] != '.', where, ": float literals are not supported");
      out.push_back({Token::Kind::Number, std::string(s.substr(i, j - i))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string str;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          str.push_back(s[j]);
          continue;
        }
        const char e = s[++j];
        str.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e);
      }
      MT_USER_CHECK(j < s.size(), where, ": a string literal is not closed");
      out.push_back({Token::Kind::String, str});
      i = j + 1;
    } else {
      std::string op;
      for (const char* o : kOps3) if (s.substr(i, 2) == o) op = o;
      for (const char* o : kOps2) if (op.empty() && s.substr(i, 2) == o) op = o;
      if (op.empty() && kOps1.find(c) != std::string::npos) op = std::string(1, c);
      MT_USER_CHECK(!op.empty(), where, ": unexpected character '", std::string(1, c), "' in an expression");
      out.push_back({Token::Kind::Op, op});
      i += op.size();
    }
  }
  out.push_back({Token::Kind::End, ""});
  return out;
}

// ---- parsing ----

const Token& ExprParser::peek(size_t ahead) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }

bool ExprParser::accept(std::string_view text) {
  const Token& t = peek();
  if (t.kind == Token::Kind::String || t.kind == Token::Kind::End || t.text != text) return false;
  ++pos_;
  return true;
}

void ExprParser::expect(std::string_view text) {
  MT_USER_CHECK(accept(text), where_, ": expected '", text, "' but found '", peek().text, "'");
}

std::string ExprParser::name() {
  MT_USER_CHECK(peek().kind == Token::Kind::Name, where_, ": expected a name but found '", peek().text, "'");
  return toks_[pos_++].text;
}

void ExprParser::unsupported(const std::string& construct) const {
  throw UserError(cat(where_, ": uses ", construct, ", which meshtrain's chat-template renderer does not support"));
}

ExprPtr ExprParser::expression() { return conditional(); }

ExprPtr ExprParser::conditional() {
  ExprPtr e = or_expr();
  if (!accept("if")) return e;
  ExprPtr cond = or_expr();
  ExprPtr other = accept("else") ? conditional() : nullptr;
  if (!other) {
    other = node(Expr::Kind::Literal);
    other->value = undefined();
  }
  return node(Expr::Kind::Cond, "", list(std::move(cond), std::move(e), std::move(other)));
}

ExprPtr ExprParser::or_expr() {
  ExprPtr e = and_expr();
  while (accept("or")) e = node(Expr::Kind::Or, "", list(std::move(e), and_expr()));
  return e;
}

ExprPtr ExprParser::and_expr() {
  ExprPtr e = not_expr();
  while (accept("and")) e = node(Expr::Kind::And, "", list(std::move(e), not_expr()));
  return e;
}

ExprPtr ExprParser::not_expr() {
  if (accept("not")) return node(Expr::Kind::Not, "", list(not_expr()));
  return compare();
}

ExprPtr ExprParser::compare() {
  ExprPtr e = concat();
  for (;;) {
    std::string op;
    for (const char* o : {"==", "!=", "<=", ">=", "<", ">", "in"})
      if (op.empty() && accept(o)) op = o;
    if (op.empty() && peek().text == "not" && peek(1).text == "in") {
      pos_ += 2;
      op = "not in";
    }
    if (op.empty()) return e;
    e = node(Expr::Kind::Binary, op, list(std::move(e), concat()));
  }
}

ExprPtr ExprParser::concat() {
  ExprPtr e = sum();
  while (accept("~")) e = node(Expr::Kind::Binary, "~", list(std::move(e), sum()));
  return e;
}

ExprPtr ExprParser::sum() {
  ExprPtr e = product();
  for (;;) {
    if (accept("+")) e = node(Expr::Kind::Binary, "+", list(std::move(e), product()));
    else if (accept("-")) e = node(Expr::Kind::Binary, "-", list(std::move(e), product()));
    else return e;
  }
}

ExprPtr ExprParser::product() {
  ExprPtr e = unary();
  for (;;) {
    std::string op;
    for (const char* o : {"*", "//", "/", "%"})
      if (op.empty() && accept(o)) op = o;
    if (op.empty()) return e;
    e = node(Expr::Kind::Binary, op, list(std::move(e), unary()));
  }
}

ExprPtr ExprParser::unary() {
  if (accept("-")) return node(Expr::Kind::Neg, "", list(unary()));
  return postfix(primary());
}

void ExprParser::call_args(Expr& call) {
  while (!accept(")")) {
    if (peek().kind == Token::Kind::Name && peek(1).text == "=") {
      std::string key = name();
      expect("=");
      call.kwargs.emplace_back(std::move(key), expression());
    } else {
      if (!call.kwargs.empty()) unsupported("a positional argument after a keyword argument");
      call.args.push_back(expression());
    }
    if (!accept(",")) {
      expect(")");
      break;
    }
  }
}

ExprPtr ExprParser::iterable() { return or_expr(); }

ExprPtr ExprParser::postfix(ExprPtr e) {
  for (;;) {
    if (accept(".")) {
      std::string attr = name();
      if (!accept("(")) {
        e = node(Expr::Kind::Attr, attr, list(std::move(e)));
        continue;
      }
      if (!known_method(attr)) unsupported("the method '." + attr + "()'");
      e = node(Expr::Kind::Method, attr, list(std::move(e)));
      call_args(*e);
    } else if (accept("[")) {
      e = subscript(std::move(e));
    } else if (accept("|")) {
      const std::string f = name();
      if (!known_filter(f)) unsupported("the filter '" + f + "'");
      e = node(Expr::Kind::Filter, f, list(std::move(e)));
      if (accept("(")) call_args(*e);
    } else if (accept("is")) {
      const bool neg = accept("not");
      const std::string t = peek().kind == Token::Kind::Op && (peek().text == "==" || peek().text == "!=") ? toks_[pos_++].text : name();
      if (!known_test(t)) unsupported("the test 'is " + t + "'");
      e = node(Expr::Kind::Test, t, list(std::move(e)));
      e->negated = neg;
      if (accept("(")) call_args(*e);
      else if (peek().kind == Token::Kind::String || peek().kind == Token::Kind::Number) e->args.push_back(primary());
    } else if (peek().text == "(") {
      unsupported("a call of something other than a known function or method");
    } else {
      return e;
    }
  }
}

// After '[': an index `[i]` or a slice `[a:b]`, `[a:b:c]` (each bound may be left out).
ExprPtr ExprParser::subscript(ExprPtr e) {
  const auto bound = [&](std::initializer_list<const char*> ends) -> ExprPtr {
    for (const char* end : ends)
      if (peek().text == end && peek().kind == Token::Kind::Op) return nullptr;
    return expression();
  };
  ExprPtr a = bound({":"});
  if (!accept(":")) {
    expect("]");
    return node(Expr::Kind::Index, "", list(std::move(e), std::move(a)));
  }
  ExprPtr b = bound({":", "]"});
  ExprPtr step = accept(":") ? bound({"]"}) : nullptr;
  expect("]");
  return node(Expr::Kind::Slice, "", list(std::move(e), std::move(a), std::move(b), std::move(step)));
}

ExprPtr ExprParser::primary() {
  const Token t = peek();
  if (t.kind == Token::Kind::String || t.kind == Token::Kind::Number) {
    ++pos_;
    auto e = node(Expr::Kind::Literal);
    if (t.kind == Token::Kind::String) {
      e->value = t.text;
      while (peek().kind == Token::Kind::String) e->value = e->value.get<std::string>() + toks_[pos_++].text;  // 'a' 'b'
    } else {
      e->value = std::stoll(t.text);
    }
    return e;
  }
  if (accept("(")) {
    ExprPtr e = expression();
    if (peek().text == ",") unsupported("a tuple");
    expect(")");
    return e;
  }
  if (accept("[")) {
    std::vector<ExprPtr> items;
    while (!accept("]")) {
      items.push_back(expression());
      if (!accept(",")) {
        expect("]");
        break;
      }
    }
    return node(Expr::Kind::List, "", std::move(items));
  }
  if (t.text == "{") unsupported("a dict literal");
  MT_USER_CHECK(t.kind == Token::Kind::Name, where_, ": expected a value but found '", t.text, "'");
  ++pos_;
  auto lit = [&](Value v) {
    auto e = node(Expr::Kind::Literal);
    e->value = std::move(v);
    return e;
  };
  if (t.text == "true" || t.text == "True") return lit(true);
  if (t.text == "false" || t.text == "False") return lit(false);
  if (t.text == "none" || t.text == "None") return lit(nullptr);
  if (accept("(")) {
    if (!known_function(t.text)) unsupported("the function '" + t.text + "()'");
    auto call = node(Expr::Kind::Call, t.text);
    call_args(*call);
    return call;
  }
  return node(Expr::Kind::Name, t.text);
}

// ---- evaluation ----

namespace {

struct Eval {
  const Scope& scope;
  const std::string& where;

  [[noreturn]] void fail(const std::string& what) const { throw UserError(cat(where, ": ", what)); }

  static std::string kind_of(const Value& v) {
    if (v.is_discarded()) return "undefined";
    return v.type_name();
  }

  int64_t integer(const Value& v, const char* what) const {
    if (!v.is_number_integer() && !v.is_number_unsigned()) fail(cat(what, " needs an integer, got ", kind_of(v)));
    return v.get<int64_t>();
  }

  // Python indexes a string by code point.
  Value member(const Value& obj, const Value& key) const {
    if (obj.is_discarded()) fail("a member of an undefined value");
    if (obj.is_object()) {
      if (!key.is_string()) return undefined();
      auto it = obj.find(key.get<std::string>());
      return it == obj.end() ? undefined() : *it;
    }
    if (!(obj.is_array() || obj.is_string()) || !key.is_number_integer()) return undefined();
    const std::vector<std::string> chars = obj.is_string() ? code_points(obj.get<std::string>()) : std::vector<std::string>();
    const int64_t n = obj.is_array() ? static_cast<int64_t>(obj.size()) : static_cast<int64_t>(chars.size());
    int64_t i = key.get<int64_t>();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return undefined();
    return obj.is_array() ? obj[static_cast<size_t>(i)] : Value(chars[static_cast<size_t>(i)]);
  }

  // Python's slice semantics, a negative step included.
  Value slice(const Value& obj, const Expr* a, const Expr* b, const Expr* c) const {
    if (!obj.is_array() && !obj.is_string()) fail(cat("slicing needs a list or string, got ", kind_of(obj)));
    const std::vector<std::string> chars = obj.is_string() ? code_points(obj.get<std::string>()) : std::vector<std::string>();
    const int64_t n = obj.is_array() ? static_cast<int64_t>(obj.size()) : static_cast<int64_t>(chars.size());
    const int64_t step = c ? integer(eval(*c), "a slice step") : 1;
    if (step == 0) fail("a slice step of 0");
    auto bound = [&](const Expr* e, int64_t dflt) {
      if (!e) return dflt;
      int64_t i = integer(eval(*e), "a slice bound");
      if (i < 0) i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t lo = bound(a, step > 0 ? 0 : n - 1), hi = bound(b, step > 0 ? n : -1);
    Value out = Value::array();
    std::string text;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (obj.is_string()) text += chars[static_cast<size_t>(i)];
      else out.push_back(obj[static_cast<size_t>(i)]);
    }
    return obj.is_string() ? Value(text) : out;
  }

  bool contains(const Value& hay, const Value& needle) const {
    if (hay.is_string()) {
      if (!needle.is_string()) fail(cat("'in' on a string needs a string, got ", kind_of(needle)));
      return hay.get_ref<const std::string&>().find(needle.get_ref<const std::string&>()) != std::string::npos;
    }
    if (hay.is_array()) return std::find(hay.begin(), hay.end(), needle) != hay.end();
    if (hay.is_object()) return needle.is_string() && hay.contains(needle.get<std::string>());
    if (hay.is_discarded()) return false;  // Jinja's Undefined is an empty container
    fail(cat("'in' needs a string, list or mapping, got ", kind_of(hay)));
  }

  Value binary(const std::string& op, const Value& a, const Value& b) const {
    if (op == "==") return a == b;
    if (op == "!=") return a != b;
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    if (op == "~") return to_output(a, where) + to_output(b, where);
    if (op == "+" && a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
    if (op == "+" && a.is_array() && b.is_array()) {
      Value out = a;
      for (const auto& x : b) out.push_back(x);
      return out;
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (!((a.is_number() && b.is_number()) || (a.is_string() && b.is_string())))
        fail(cat("'", op, "' between ", kind_of(a), " and ", kind_of(b)));
      return op == "<" ? a < b : op == ">" ? b < a : op == "<=" ? !(b < a) : !(a < b);
    }
    const int64_t x = integer(a, op.c_str()), y = integer(b, op.c_str());
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (y == 0) fail(cat("division by zero in '", op, "'"));
    if (op == "//") return x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);  // Python floors
    if (op == "%") return ((x % y) + y) % y;
    fail(cat("the operator '", op, "' on integers (true division gives a float)"));
  }

  // A global function is defined as a name too (`strftime_now is defined`); a variable of that name wins.
  Value name(const std::string& n) const {
    Value v = scope.lookup(n);
    if (is_undefined(v) && known_function(n)) return "<built-in function " + n + ">";
    return v;
  }

  // The arguments of a call, filter, test or method, from `first` on.
  Args arguments(const Expr& e, size_t first) const {
    Args out;
    for (size_t i = first; i < e.args.size(); ++i) out.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) out.named.emplace_back(k, eval(*v));
    return out;
  }

  Value eval(const Expr& e) const {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return name(e.text);
      case Expr::Kind::Attr: return member(eval(*e.args[0]), e.text);
      case Expr::Kind::Index: return member(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::Slice: return slice(eval(*e.args[0]), e.args[1].get(), e.args[2].get(), e.args[3].get());
      case Expr::Kind::Not: return !truthy(eval(*e.args[0]));
      case Expr::Kind::Neg: return -integer(eval(*e.args[0]), "'-'");
      case Expr::Kind::And: { Value a = eval(*e.args[0]); return truthy(a) ? eval(*e.args[1]) : a; }
      case Expr::Kind::Or: { Value a = eval(*e.args[0]); return truthy(a) ? a : eval(*e.args[1]); }
      case Expr::Kind::Cond: return truthy(eval(*e.args[0])) ? eval(*e.args[1]) : eval(*e.args[2]);
      case Expr::Kind::Binary: return binary(e.text, eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::Filter: return apply_filter(e.text, eval(*e.args[0]), arguments(e, 1), where);
      case Expr::Kind::Test: return apply_test(e.text, eval(*e.args[0]), arguments(e, 1), where) != e.negated;
      case Expr::Kind::Method: return call_method(e.text, eval(*e.args[0]), arguments(e, 1), where);
      case Expr::Kind::Call: return call_function(e.text, arguments(e, 0), where);
      case Expr::Kind::List: {
        Value out = Value::array();
        for (const auto& a : e.args) out.push_back(eval(*a));
        return out;
      }
    }
    return undefined();
  }
};

}  // namespace

Value evaluate(const Expr& e, const Scope& scope, const std::string& where) { return Eval{scope, where}.eval(e); }

}  // namespace meshtrain::text::jinja
