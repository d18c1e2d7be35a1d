#include "tokenizer/jinja/template.h"

#include <fmt/format.h>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/eval.h"
#include "tokenizer/jinja/parser.h"

namespace serve8::jinja {
namespace {

void check_names(const Expr* e) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kFilter && !is_filter_name(e->name)) {
    throw JinjaError(e->line, fmt::format("No filter named '{}'.", e->name));
  }
  if (e->kind == ExprKind::kTest && !is_test_name(e->name)) {
    throw JinjaError(e->line, fmt::format("No test named '{}'.", e->name));
  }
  for (const ExprPtr& child : e->children) check_names(child.get());
  for (const auto& kw : e->kwargs) check_names(kw.second.get());
}

void check_names(const Body& body) {
  for (const StmtPtr& s : body) {
    check_names(s->expr.get());
    check_names(s->condition.get());
    check_names(s->target_object.get());
    for (const auto& [condition, branch] : s->branches) {
      check_names(condition.get());
      check_names(branch);
    }
    for (const auto& param : s->params) check_names(param.second.get());
    check_names(s->body);
    check_names(s->else_body);
  }
}

}  // namespace

JinjaTemplate::JinjaTemplate(std::string_view source) : body_(parse_template(source)), globals_(make_globals()) {
  check_names(body_);
}

TaintedString JinjaTemplate::render(const Dict& context) const {
  Dict scope = globals_;
  for (const auto& [key, value] : context.items) scope.set(key, value);
  Evaluator evaluator(scope);
  return evaluator.render(body_);
}

}  // namespace serve8::jinja
