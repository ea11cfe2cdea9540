// Expressions of the Jinja subset chat templates use (private to the text room; the statement layer is
// jinja_template.h): literals, lists, names, `.attr` / `[index]` / `[a:b:c]`, + - * / // % ~, comparisons,
// `in`, and/or/not, `x if c else y`, keyword arguments, and the filters, tests, methods and functions of
// jinja_builtins.h. Anything else (dict literals, tuples, float literals, an unknown filter, …) is a
// UserError naming the construct when the template is parsed.
//
// Values are nlohmann::ordered_json (a mapping keeps its keys' order, as a Python dict does, for `tojson` and
// `items`); Jinja's "undefined" is a value of type discarded.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::text::jinja {

using Value = nlohmann::ordered_json;

Value undefined();
bool is_undefined(const Value& v);
bool truthy(const Value& v);
// How {{ v }} prints a value: strings as they are, numbers and True/False/None as Python prints them.
std::string to_output(const Value& v, const std::string& where);

// Variables visible to an expression (the template's scopes).
class Scope {
 public:
  virtual ~Scope() = default;
  virtual Value lookup(const std::string& name) const = 0;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One node of a parsed expression.
struct Expr {
  enum class Kind { Literal, Name, Attr, Index, Slice, Not, Neg, Binary, And, Or, Cond, Filter, Test, Call, Method, List };
  Kind kind;
  std::string text;           // name, attribute, operator, filter / test / function / method
  Value value;                // a literal
  std::vector<ExprPtr> args;  // operands (nullptr: an omitted slice bound); a call's positional arguments
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // a call's keyword arguments
  bool negated = false;       // `is not`
};

// The tokens of one tag's content.
struct Token {
  enum class Kind { Name, String, Number, Op, End } kind;
  std::string text;
};
std::vector<Token> lex_expression(std::string_view src, const std::string& where);

// A cursor over a tag's tokens; `where` names the template in errors.
class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, std::string where) : toks_(std::move(tokens)), where_(std::move(where)) {}
  ExprPtr expression();
  // An expression without a trailing `if … else …` (a for loop's iterable, which a filter `if` may follow).
  ExprPtr iterable();
  const Token& peek(size_t ahead = 0) const;
  bool accept(std::string_view text);  // consumes the token when it is `text` (an operator or a keyword)
  void expect(std::string_view text);
  std::string name();                  // consumes an identifier
  bool at_end() const { return peek().kind == Token::Kind::End; }
  [[noreturn]] void unsupported(const std::string& construct) const;

 private:
  ExprPtr conditional();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr concat();
  ExprPtr sum();
  ExprPtr product();
  ExprPtr unary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr subscript(ExprPtr e);
  ExprPtr primary();
  void call_args(Expr& call);  // after '(': appends the arguments to call.args / call.kwargs

  std::vector<Token> toks_;
  size_t pos_ = 0;
  std::string where_;
};

Value evaluate(const Expr& e, const Scope& scope, const std::string& where);

}  // namespace meshtrain::text::jinja
