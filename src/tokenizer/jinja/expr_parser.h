// Parses Jinja expressions with jinja2's grammar and precedence: or < and < not < comparisons
// (chained) < + - < ~ < * / // % < ** < unary - + < filters and tests < postfix (. [] ()).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/token_stream.h"

namespace serve8::jinja {

ExprPtr make_expr(ExprKind kind, int line);

class ExprParser {
 public:
  explicit ExprParser(TokenStream& tokens) : ts_(tokens) {}

  // An expression, or a tuple of them ("a, b"); with_condition allows "x if c else y".
  ExprPtr parse_tuple(bool with_condition);
  ExprPtr parse_expression(bool with_condition);
  // At "|" (or at the filter name in a filter block, where operand is null).
  ExprPtr parse_filter(ExprPtr operand);

 private:
  bool at_tuple_end() const;
  ExprPtr parse_condition();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  template <typename Next>
  ExprPtr parse_left_assoc(std::initializer_list<std::string_view> ops, Next next);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary_with_filter();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr object, int line);
  ExprPtr parse_call(ExprPtr operand, ExprKind kind, std::string name);
  ExprPtr parse_filter_expr(ExprPtr node);
  std::string parse_dotted_name();
  ExprPtr parse_test(ExprPtr operand);

  static constexpr int kMaxDepth = 100;
  TokenStream& ts_;
  int depth_ = 0;
};

}  // namespace serve8::jinja
