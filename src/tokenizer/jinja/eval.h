// Renders a parsed Jinja template against a context, with jinja2's scoping (a for loop's body gets
// a fresh scope every iteration; if blocks share their enclosing one) and Python's operator
// semantics. One Evaluator per render: it holds that render's variables and output.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace serve8::jinja {

class Evaluator {
 public:
  // globals: the template's globals and the caller's context (context entries win).
  explicit Evaluator(const Dict& globals);

  // Throws JinjaError (with the template line) when rendering fails.
  TaintedString render(const Body& body);

  // For the builtins: the pieces of jinja2's runtime they call back into.
  Value call(const Value& callee, const CallArgs& args);
  Value get_attr(const Value& object, const std::string& name);
  Value get_item(const Value& object, const Value& key);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::map<std::string, Value, std::less<>>;

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  TaintedString capture(const Body& body);
  Value make_macro(const Stmt& s);

  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_filter(const Expr& e, const Value* block_operand);
  CallArgs eval_args(const Expr& e, std::size_t first_positional);

  Value lookup(std::string_view name) const;
  void assign(const std::vector<std::string>& targets, const Value& value, int line);

  static constexpr int kMaxMacroDepth = 100;
  int macro_depth_ = 0;
  std::vector<Scope> scopes_;  // [0]: globals and context; [1]: the template's top level; then inner
  TaintedString* out_ = nullptr;
};

}  // namespace serve8::jinja
