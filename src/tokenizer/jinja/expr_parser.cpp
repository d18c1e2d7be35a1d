#include "tokenizer/jinja/expr_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

namespace serve8::jinja {

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

namespace {

ExprPtr make_binary(std::string op, ExprPtr left, ExprPtr right, int line) {
  ExprPtr e = make_expr(ExprKind::kBinary, line);
  e->name = std::move(op);
  e->children.push_back(std::move(left));
  e->children.push_back(std::move(right));
  return e;
}

}  // namespace

bool ExprParser::at_tuple_end() const {
  const TokenType t = ts_.cur().type;
  return t == TokenType::kVariableEnd || t == TokenType::kBlockEnd || t == TokenType::kEnd || ts_.is_op(")") ||
         ts_.is_op("]") || ts_.is_name("in") || ts_.is_name("if");
}

ExprPtr ExprParser::parse_tuple(bool with_condition) {
  const int line = ts_.cur().line;
  if (ts_.cur().type == TokenType::kVariableEnd || ts_.cur().type == TokenType::kBlockEnd ||
      ts_.cur().type == TokenType::kEnd) {
    ts_.fail(fmt::format("Expected an expression, got '{}'", TokenStream::describe(ts_.cur())));
  }
  ExprPtr first = parse_expression(with_condition);
  if (!ts_.is_op(",")) return first;
  ExprPtr tuple = make_expr(ExprKind::kTuple, line);
  tuple->children.push_back(std::move(first));
  while (ts_.is_op(",")) {
    ts_.advance();
    if (at_tuple_end()) break;
    tuple->children.push_back(parse_expression(with_condition));
  }
  return tuple;
}

ExprPtr ExprParser::parse_expression(bool with_condition) {
  // Nesting deeper than any real template is refused rather than allowed to overflow the stack.
  if (depth_ >= kMaxDepth) ts_.fail("expression nested too deeply");
  ++depth_;
  ExprPtr e = with_condition ? parse_condition() : parse_or();
  --depth_;
  return e;
}

ExprPtr ExprParser::parse_condition() {
  ExprPtr expr = parse_or();
  while (ts_.is_name("if")) {
    const int line = ts_.cur().line;
    ts_.advance();
    ExprPtr cond = make_expr(ExprKind::kCondition, line);
    cond->children.push_back(parse_or());
    cond->children.push_back(std::move(expr));
    if (ts_.is_name("else")) {
      ts_.advance();
      cond->children.push_back(parse_condition());
    } else {
      cond->children.push_back(nullptr);
    }
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr left = parse_and();
  while (ts_.is_name("or")) {
    const int line = ts_.cur().line;
    ts_.advance();
    left = make_binary("or", std::move(left), parse_and(), line);
  }
  return left;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr left = parse_not();
  while (ts_.is_name("and")) {
    const int line = ts_.cur().line;
    ts_.advance();
    left = make_binary("and", std::move(left), parse_not(), line);
  }
  return left;
}

ExprPtr ExprParser::parse_not() {
  if (!ts_.is_name("not")) return parse_compare();
  ExprPtr e = make_expr(ExprKind::kUnary, ts_.cur().line);
  ts_.advance();
  e->name = "not";
  e->children.push_back(parse_not());
  return e;
}

ExprPtr ExprParser::parse_compare() {
  const int line = ts_.cur().line;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (ts_.cur().type == TokenType::kOp &&
        (ts_.cur().value == "==" || ts_.cur().value == "!=" || ts_.cur().value == "<" || ts_.cur().value == ">" ||
         ts_.cur().value == "<=" || ts_.cur().value == ">=")) {
      op = ts_.cur().value;
      ts_.advance();
    } else if (ts_.is_name("in")) {
      op = "in";
      ts_.advance();
    } else if (ts_.is_name("not") && ts_.peek().type == TokenType::kName && ts_.peek().value == "in") {
      op = "notin";
      ts_.advance();
      ts_.advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = make_expr(ExprKind::kCompare, line);
      cmp->children.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->children.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

template <typename Next>
ExprPtr ExprParser::parse_left_assoc(std::initializer_list<std::string_view> ops, Next next) {
  ExprPtr left = (this->*next)();
  while (ts_.cur().type == TokenType::kOp && std::find(ops.begin(), ops.end(), ts_.cur().value) != ops.end()) {
    const int line = ts_.cur().line;
    std::string op = ts_.cur().value;
    ts_.advance();
    left = make_binary(std::move(op), std::move(left), (this->*next)(), line);
  }
  return left;
}

ExprPtr ExprParser::parse_math1() { return parse_left_assoc({"+", "-"}, &ExprParser::parse_concat); }
ExprPtr ExprParser::parse_concat() { return parse_left_assoc({"~"}, &ExprParser::parse_math2); }
ExprPtr ExprParser::parse_math2() { return parse_left_assoc({"*", "/", "//", "%"}, &ExprParser::parse_pow); }
ExprPtr ExprParser::parse_pow() { return parse_left_assoc({"**"}, &ExprParser::parse_unary_with_filter); }
ExprPtr ExprParser::parse_unary_with_filter() { return parse_unary(true); }

ExprPtr ExprParser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (ts_.is_op("-") || ts_.is_op("+")) {
    node = make_expr(ExprKind::kUnary, ts_.cur().line);
    node->name = ts_.cur().value;
    ts_.advance();
    if (depth_ >= kMaxDepth) ts_.fail("expression nested too deeply");
    ++depth_;
    node->children.push_back(parse_unary(false));
    --depth_;
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = ts_.cur();
  ExprPtr e = make_expr(ExprKind::kLiteral, t.line);
  switch (t.type) {
    case TokenType::kName:
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        e->literal = Value::boolean(t.value[0] == 't' || t.value[0] == 'T');
      } else if (t.value == "none" || t.value == "None") {
        e->literal = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      ts_.advance();
      return e;
    case TokenType::kString: {
      std::string text;
      while (ts_.cur().type == TokenType::kString) {
        text += ts_.cur().value;
        ts_.advance();
      }
      e->literal = Value::string(std::move(text));
      return e;
    }
    case TokenType::kInt:
      e->literal = Value::integer(t.int_value);
      ts_.advance();
      return e;
    case TokenType::kFloat:
      e->literal = Value::floating(t.float_value);
      ts_.advance();
      return e;
    default:
      break;
  }
  if (ts_.is_op("(")) {
    ts_.advance();
    if (ts_.is_op(")")) {
      ts_.advance();
      e->kind = ExprKind::kTuple;
      return e;
    }
    ExprPtr inner = parse_tuple(true);
    ts_.expect_op(")");
    return inner;
  }
  if (ts_.is_op("[") || ts_.is_op("{")) {
    const bool is_list = ts_.is_op("[");
    e->kind = is_list ? ExprKind::kList : ExprKind::kDict;
    ts_.advance();
    const std::string_view close = is_list ? "]" : "}";
    while (!ts_.is_op(close)) {
      e->children.push_back(parse_expression(true));
      if (!is_list) {
        ts_.expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      if (!ts_.is_op(",")) break;
      ts_.advance();
    }
    ts_.expect_op(close);
    return e;
  }
  ts_.fail(fmt::format("unexpected '{}'", TokenStream::describe(t)));
}

ExprPtr ExprParser::parse_postfix(ExprPtr node) {
  while (true) {
    const int line = ts_.cur().line;
    if (ts_.is_op(".")) {
      ts_.advance();
      if (ts_.cur().type == TokenType::kInt) {
        ExprPtr item = make_expr(ExprKind::kGetItem, line);
        item->children.push_back(std::move(node));
        ExprPtr index = make_expr(ExprKind::kLiteral, line);
        index->literal = Value::integer(ts_.cur().int_value);
        item->children.push_back(std::move(index));
        ts_.advance();
        node = std::move(item);
        continue;
      }
      ExprPtr attr = make_expr(ExprKind::kGetAttr, line);
      attr->name = ts_.expect_name();
      attr->children.push_back(std::move(node));
      node = std::move(attr);
    } else if (ts_.is_op("[")) {
      ts_.advance();
      node = parse_subscript(std::move(node), line);
      ts_.expect_op("]");
    } else if (ts_.is_op("(")) {
      node = parse_call(std::move(node), ExprKind::kCall, "");
    } else {
      return node;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr object, int line) {
  ExprPtr start;
  if (!ts_.is_op(":")) {
    start = parse_expression(true);
    if (!ts_.is_op(":")) {
      ExprPtr item = make_expr(ExprKind::kGetItem, line);
      item->children.push_back(std::move(object));
      item->children.push_back(std::move(start));
      return item;
    }
  }
  ts_.advance();  // the first ':'
  ExprPtr slice = make_expr(ExprKind::kSlice, line);
  slice->children.push_back(std::move(object));
  slice->children.push_back(std::move(start));
  slice->children.push_back(ts_.is_op(":") || ts_.is_op("]") ? nullptr : parse_expression(true));
  ExprPtr step;
  if (ts_.is_op(":")) {
    ts_.advance();
    if (!ts_.is_op("]")) step = parse_expression(true);
  }
  slice->children.push_back(std::move(step));
  return slice;
}

// "(" args ")" after a callee, or after a filter/test name: positional then name=value args.
ExprPtr ExprParser::parse_call(ExprPtr operand, ExprKind kind, std::string name) {
  ExprPtr call = make_expr(kind, ts_.cur().line);
  call->name = std::move(name);
  call->children.push_back(std::move(operand));
  ts_.expect_op("(");
  while (!ts_.is_op(")")) {
    if (ts_.cur().type == TokenType::kName && ts_.peek().type == TokenType::kOp && ts_.peek().value == "=") {
      std::string key = ts_.cur().value;
      ts_.advance();
      ts_.advance();
      call->kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!call->kwargs.empty()) ts_.fail("positional argument follows keyword argument");
      call->children.push_back(parse_expression(true));
    }
    if (!ts_.is_op(",")) break;
    ts_.advance();
  }
  ts_.expect_op(")");
  return call;
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (ts_.is_op("|")) {
      node = parse_filter(std::move(node));
    } else if (ts_.is_name("is")) {
      node = parse_test(std::move(node));
    } else if (ts_.is_op("(")) {
      node = parse_call(std::move(node), ExprKind::kCall, "");
    } else {
      return node;
    }
  }
}

std::string ExprParser::parse_dotted_name() {
  std::string name = ts_.expect_name();
  while (ts_.is_op(".")) {
    ts_.advance();
    name += '.';
    name += ts_.expect_name();
  }
  return name;
}

// At "|" (or at the filter name in a filter block, where operand is null).
ExprPtr ExprParser::parse_filter(ExprPtr operand) {
  if (ts_.is_op("|")) ts_.advance();
  const int line = ts_.cur().line;
  std::string name = parse_dotted_name();
  if (ts_.is_op("(")) return parse_call(std::move(operand), ExprKind::kFilter, std::move(name));
  ExprPtr filter = make_expr(ExprKind::kFilter, line);
  filter->name = std::move(name);
  filter->children.push_back(std::move(operand));
  return filter;
}

ExprPtr ExprParser::parse_test(ExprPtr operand) {
  const int line = ts_.cur().line;
  ts_.advance();  // "is"
  bool negated = false;
  if (ts_.is_name("not")) {
    negated = true;
    ts_.advance();
  }
  std::string name = parse_dotted_name();
  ExprPtr test;
  if (ts_.is_op("(")) {
    test = parse_call(std::move(operand), ExprKind::kTest, std::move(name));
  } else {
    test = make_expr(ExprKind::kTest, line);
    test->name = std::move(name);
    test->children.push_back(std::move(operand));
    const TokenType t = ts_.cur().type;
    const bool arg_follows = t == TokenType::kName || t == TokenType::kString || t == TokenType::kInt ||
                             t == TokenType::kFloat || ts_.is_op("[") || ts_.is_op("{");
    if (arg_follows && !ts_.is_name("else") && !ts_.is_name("or") && !ts_.is_name("and")) {
      if (ts_.is_name("is")) ts_.fail("You cannot chain multiple tests with is");
      test->children.push_back(parse_postfix(parse_primary()));
    }
  }
  test->negated = negated;
  return test;
}

std::vector<Token> tokens_;
std::size_t pos_ = 0;
std::vector<std::vector<std::string_view>> end_stack_;  // the end tags each open block waits for
std::vector<std::string> tag_stack_;                    // the statements being parsed

}  // namespace serve8::jinja
