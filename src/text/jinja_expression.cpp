#include "jinja_expression.h"

#include <algorithm>
#include <cctype>
#include <cmath>

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

std::vector<ExprPtr> ExprParser::call_args() {
  std::vector<ExprPtr> args;
  while (!accept(")")) {
    if (peek().kind == Token::Kind::Name && peek(1).text == "=") unsupported("a keyword argument ('" + peek().text + "=')");
    args.push_back(expression());
    if (!accept(",")) {
      expect(")");
      break;
    }
  }
  return args;
}

ExprPtr ExprParser::postfix(ExprPtr e) {
  static const std::vector<std::string> kFilters = {"trim", "length", "lower", "upper", "string"};
  static const std::vector<std::string> kTests = {"defined", "undefined", "none", "string", "number"};
  static const std::vector<std::string> kMethods = {"strip", "lstrip", "rstrip", "lower", "upper", "startswith", "endswith"};
  const auto known = [](const std::vector<std::string>& v, const std::string& n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  for (;;) {
    if (accept(".")) {
      std::string attr = name();
      if (!accept("(")) {
        e = node(Expr::Kind::Attr, attr, list(std::move(e)));
        continue;
      }
      if (!known(kMethods, attr)) unsupported("the method '." + attr + "()'");
      auto args = call_args();
      args.insert(args.begin(), std::move(e));
      e = node(Expr::Kind::Method, attr, std::move(args));
    } else if (accept("[")) {
      ExprPtr a = peek().text == ":" ? nullptr : expression();
      if (!accept(":")) {
        expect("]");
        e = node(Expr::Kind::Index, "", list(std::move(e), std::move(a)));
        continue;
      }
      ExprPtr b = peek().text == "]" ? nullptr : expression();
      if (peek().text == ":") unsupported("a slice step ('[a:b:c]')");
      expect("]");
      e = node(Expr::Kind::Slice, "", list(std::move(e), std::move(a), std::move(b)));
    } else if (accept("|")) {
      const std::string f = name();
      if (!known(kFilters, f)) unsupported("the filter '" + f + "'");
      if (accept("(")) unsupported("arguments to the filter '" + f + "'");
      e = node(Expr::Kind::Filter, f, list(std::move(e)));
    } else if (accept("is")) {
      const bool neg = accept("not");
      const std::string t = name();
      if (!known(kTests, t)) unsupported("the test 'is " + t + "'");
      e = node(Expr::Kind::Test, t, list(std::move(e)));
      e->negated = neg;
    } else if (peek().text == "(") {
      unsupported("a call of something other than raise_exception");
    } else {
      return e;
    }
  }
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
    if (t.text != "raise_exception") unsupported("the function '" + t.text + "()'");
    return node(Expr::Kind::Call, t.text, call_args());
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

  const std::string& str(const Value& v, const char* what) const {
    if (!v.is_string()) fail(cat(what, " needs a string, got ", kind_of(v)));
    return v.get_ref<const std::string&>();
  }

  int64_t integer(const Value& v, const char* what) const {
    if (!v.is_number_integer() && !v.is_number_unsigned()) fail(cat(what, " needs an integer, got ", kind_of(v)));
    return v.get<int64_t>();
  }

  static std::string strip(std::string s, bool left, bool right) {
    const auto ws = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    if (right) while (!s.empty() && ws(s.back())) s.pop_back();
    if (left) s.erase(s.begin(), std::find_if(s.begin(), s.end(), [&](char c) { return !ws(c); }));
    return s;
  }

  static std::string cased(std::string s, bool upper) {
    for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  Value member(const Value& obj, const Value& key) const {
    if (obj.is_discarded()) fail("a member of an undefined value");
    if (obj.is_object()) {
      if (!key.is_string()) return undefined();
      auto it = obj.find(key.get<std::string>());
      return it == obj.end() ? undefined() : *it;
    }
    if (obj.is_array() || obj.is_string()) {
      if (!key.is_number_integer()) return undefined();
      const int64_t n = obj.is_array() ? static_cast<int64_t>(obj.size()) : static_cast<int64_t>(obj.get_ref<const std::string&>().size());
      int64_t i = key.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return undefined();
      return obj.is_array() ? obj[static_cast<size_t>(i)] : Value(std::string(1, obj.get_ref<const std::string&>()[static_cast<size_t>(i)]));
    }
    return undefined();
  }

  Value slice(const Value& obj, const Expr* a, const Expr* b) const {
    if (!obj.is_array() && !obj.is_string()) fail(cat("slicing needs a list or string, got ", kind_of(obj)));
    const int64_t n = obj.is_array() ? static_cast<int64_t>(obj.size()) : static_cast<int64_t>(obj.get_ref<const std::string&>().size());
    auto bound = [&](const Expr* e, int64_t dflt) {
      if (!e) return dflt;
      int64_t i = integer(eval(*e), "a slice bound");
      if (i < 0) i += n;
      return std::clamp<int64_t>(i, 0, n);
    };
    const int64_t lo = bound(a, 0), hi = std::max(lo, bound(b, n));
    if (obj.is_string()) return obj.get_ref<const std::string&>().substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo));
    Value out = Value::array();
    for (int64_t i = lo; i < hi; ++i) out.push_back(obj[static_cast<size_t>(i)]);
    return out;
  }

  bool contains(const Value& hay, const Value& needle) const {
    if (hay.is_string()) return hay.get_ref<const std::string&>().find(str(needle, "'in' on a string")) != std::string::npos;
    if (hay.is_array()) return std::find(hay.begin(), hay.end(), needle) != hay.end();
    if (hay.is_object()) return needle.is_string() && hay.contains(needle.get<std::string>());
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

  Value filter(const std::string& f, const Value& v) const {
    if (f == "trim") return strip(str(v, "trim"), true, true);
    if (f == "lower" || f == "upper") return cased(str(v, f.c_str()), f == "upper");
    if (f == "string") return v.is_string() ? v : Value(to_output(v, where));
    // length
    if (v.is_string()) return static_cast<int64_t>(v.get_ref<const std::string&>().size());
    if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.size());
    fail(cat("length of ", kind_of(v)));
  }

  Value test(const std::string& t, const Value& v) const {
    if (t == "defined") return !v.is_discarded();
    if (t == "undefined") return v.is_discarded();
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    return v.is_number();
  }

  Value method(const Expr& e) const {
    const Value self = eval(*e.args[0]);
    const std::string& s = str(self, ("." + e.text + "()").c_str());
    const size_t nargs = e.args.size() - 1;
    if (e.text == "startswith" || e.text == "endswith") {
      if (nargs != 1) fail(cat(".", e.text, "() takes one argument"));
      const Value arg = eval(*e.args[1]);
      const std::string& p = str(arg, e.text.c_str());
      return e.text == "startswith" ? s.rfind(p, 0) == 0 : (s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0);
    }
    if (nargs != 0) fail(cat(".", e.text, "() with arguments is not supported"));
    if (e.text == "lower" || e.text == "upper") return cased(s, e.text == "upper");
    return strip(s, e.text != "rstrip", e.text != "lstrip");
  }

  Value eval(const Expr& e) const {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return scope.lookup(e.text);
      case Expr::Kind::Attr: return member(eval(*e.args[0]), e.text);
      case Expr::Kind::Index: return member(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::Slice: return slice(eval(*e.args[0]), e.args[1].get(), e.args[2].get());
      case Expr::Kind::Not: return !truthy(eval(*e.args[0]));
      case Expr::Kind::Neg: return -integer(eval(*e.args[0]), "'-'");
      case Expr::Kind::And: { Value a = eval(*e.args[0]); return truthy(a) ? eval(*e.args[1]) : a; }
      case Expr::Kind::Or: { Value a = eval(*e.args[0]); return truthy(a) ? a : eval(*e.args[1]); }
      case Expr::Kind::Cond: return truthy(eval(*e.args[0])) ? eval(*e.args[1]) : eval(*e.args[2]);
      case Expr::Kind::Binary: return binary(e.text, eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::Filter: return filter(e.text, eval(*e.args[0]));
      case Expr::Kind::Test: return test(e.text, eval(*e.args[0])).get<bool>() != e.negated;
      case Expr::Kind::Method: return method(e);
      case Expr::Kind::Call: fail(cat("the template raised: ", e.args.empty() ? std::string() : to_output(eval(*e.args[0]), where)));
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
