#include "tokenizer/jinja/eval.h"

#include <fmt/format.h>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/string.h"

namespace serve8::jinja {

Evaluator::Evaluator(const Dict& globals) {
  Scope root;
  for (const auto& [key, value] : globals.items) {
    if (key.is_string()) root[key.as_string()] = value;
  }
  scopes_.push_back(std::move(root));
  scopes_.emplace_back();
}

TaintedString Evaluator::render(const Body& body) {
  TaintedString out;
  out_ = &out;
  if (exec_body(body) != Flow::kNormal) throw JinjaError(0, "break or continue outside a loop");
  out_ = nullptr;
  return out;
}

Value Evaluator::lookup(std::string_view name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (const auto found = it->find(name); found != it->end()) return found->second;
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

// ---- statements ----

Evaluator::Flow Evaluator::exec_body(const Body& body) {
  for (const StmtPtr& s : body) {
    if (const Flow flow = exec(*s); flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

TaintedString Evaluator::capture(const Body& body) {
  TaintedString buffer;
  TaintedString* saved = out_;
  out_ = &buffer;
  const Flow flow = exec_body(body);
  out_ = saved;
  if (flow != Flow::kNormal)
    throw JinjaError(body.empty() ? 0 : body.front()->line, "break or continue outside a loop");
  return buffer;
}

Evaluator::Flow Evaluator::exec(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::kText:
      out_->append_trusted(s.text);
      return Flow::kNormal;
    case StmtKind::kOutput:
      out_->append(to_str(eval(*s.expr)));
      return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [condition, body] : s.branches) {
        if (truthy(eval(*condition))) return exec_body(body);
      }
      return exec_body(s.else_body);
    case StmtKind::kFor:
      return exec_for(s);
    case StmtKind::kSet:
      exec_set(s);
      return Flow::kNormal;
    case StmtKind::kSetBlock:
      assign(s.targets, Value::string(capture(s.body)), s.line);
      return Flow::kNormal;
    case StmtKind::kMacro:
      scopes_.back()[s.name] = make_macro(s);
      return Flow::kNormal;
    case StmtKind::kFilterBlock: {
      const Value body = Value::string(capture(s.body));
      out_->append(to_str(eval_filter(*s.expr, &body)));
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope:
      return exec_body(s.body);
  }
  return Flow::kNormal;
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& value, int line) {
  if (targets.size() == 1) {
    scopes_.back()[targets[0]] = value;
    return;
  }
  std::vector<Value> items;
  try {
    items = iterate(value);
  } catch (const EvalError& e) {
    throw JinjaError(line, fmt::format("cannot unpack non-iterable {} object", type_name(value)));
  }
  if (items.size() != targets.size()) {
    throw JinjaError(
        line, items.size() > targets.size()
                  ? fmt::format("too many values to unpack (expected {})", targets.size())
                  : fmt::format("not enough values to unpack (expected {}, got {})", targets.size(), items.size()));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
}

void Evaluator::exec_set(const Stmt& s) {
  const Value value = eval(*s.expr);
  if (!s.target_object) {
    assign(s.targets, value, s.line);
    return;
  }
  const Value target = eval(*s.target_object);
  if (target.kind() != Value::Kind::kNamespace) {
    throw JinjaError(s.line, "cannot assign attribute on non-namespace object");
  }
  target.as_namespace().attrs.set(Value::string(s.name), value);
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s) {
  std::vector<Value> items;
  try {
    items = iterate(eval(*s.expr));
  } catch (const EvalError& e) {
    throw JinjaError(s.line, e.what());
  }
  if (s.condition) {
    // The loop's "if" filters before counting, so loop.length and loop.last see only kept items.
    std::vector<Value> kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      assign(s.targets, item, s.line);
      const bool keep = truthy(eval(*s.condition));
      scopes_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body);
  const auto n = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < n; ++i) {
    Dict loop;
    const auto put = [&loop](const char* key, Value v) { loop.items.emplace_back(Value::string(key), std::move(v)); };
    put("index", Value::integer(i + 1));
    put("index0", Value::integer(i));
    put("revindex", Value::integer(n - i));
    put("revindex0", Value::integer(n - i - 1));
    put("first", Value::boolean(i == 0));
    put("last", Value::boolean(i == n - 1));
    put("length", Value::integer(n));
    put("depth", Value::integer(1));
    put("depth0", Value::integer(0));
    if (i > 0) put("previtem", items[i - 1]);
    if (i + 1 < n) put("nextitem", items[i + 1]);
    put("cycle", Value::callable("cycle", [i](Evaluator&, const CallArgs& args) {
          if (args.positional.empty()) throw EvalError("no items for cycling given");
          return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
        }));
    scopes_.emplace_back();
    scopes_.back()["loop"] = Value::dict(std::move(loop));
    assign(s.targets, items[i], s.line);
    const Flow flow = exec_body(s.body);
    scopes_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Evaluator::make_macro(const Stmt& s) {
  const Stmt* macro = &s;
  return Value::callable(s.name, [macro](Evaluator& ev, const CallArgs& args) {
    if (args.positional.size() > macro->params.size()) {
      throw EvalError(fmt::format("macro '{}' takes not more than {} argument(s)", macro->name, macro->params.size()));
    }
    Scope frame;
    for (std::size_t i = 0; i < macro->params.size(); ++i) {
      const auto& [name, default_value] = macro->params[i];
      if (i < args.positional.size()) {
        frame[name] = args.positional[i];
      } else if (const Value* kw = args.keyword_arg(name)) {
        frame[name] = *kw;
      } else if (default_value) {
        frame[name] = ev.eval(*default_value);
      } else {
        frame[name] = Value::undefined(fmt::format("parameter '{}' was not provided", name));
      }
    }
    // Runaway recursion (a template's macro calling itself forever) is an error, as Python's
    // RecursionError is, rather than a stack overflow.
    if (ev.macro_depth_ >= kMaxMacroDepth) throw EvalError("maximum recursion depth exceeded");
    ++ev.macro_depth_;
    // A macro sees the globals, the context and the template's top level, not its caller's locals.
    std::vector<Scope> saved = std::move(ev.scopes_);
    ev.scopes_ = {saved[0], saved[1], std::move(frame)};
    TaintedString body;
    try {
      body = ev.capture(macro->body);
    } catch (...) {
      ev.scopes_ = std::move(saved);
      --ev.macro_depth_;
      throw;
    }
    ev.scopes_ = std::move(saved);
    --ev.macro_depth_;
    return Value::string(std::move(body));
  });
}

// ---- expressions ----

Value Evaluator::eval(const Expr& e) {
  try {
    return eval_node(e);
  } catch (const EvalError& err) {
    throw JinjaError(e.line, err.what());
  }
}

CallArgs Evaluator::eval_args(const Expr& e, std::size_t first_positional) {
  CallArgs args;
  for (std::size_t i = first_positional; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i]));
  for (const auto& [name, value] : e.kwargs) args.keyword.emplace_back(name, eval(*value));
  return args;
}

Value Evaluator::eval_node(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& child : e.children) items.push_back(eval(*child));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) d.set(eval(*e.children[i]), eval(*e.children[i + 1]));
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr:
      return get_attr(eval(*e.children[0]), e.name);
    case ExprKind::kGetItem: {
      const Value object = eval(*e.children[0]);
      return get_item(object, eval(*e.children[1]));
    }
    case ExprKind::kSlice: {
      const Value object = eval(*e.children[0]);
      Value parts[3];
      const Value* ptrs[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i) {
        if (e.children[i + 1]) {
          parts[i] = eval(*e.children[i + 1]);
          ptrs[i] = &parts[i];
        }
      }
      return slice(object, ptrs[0], ptrs[1], ptrs[2]);
    }
    case ExprKind::kCall: {
      const Value callee = eval(*e.children[0]);
      return call(callee, eval_args(e, 1));
    }
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      const Value operand = eval(*e.children[0]);
      return Value::boolean(apply_test(*this, e.name, operand, eval_args(e, 1)) != e.negated);
    }
    case ExprKind::kUnary: {
      const Value operand = eval(*e.children[0]);
      if (e.name == "not") return Value::boolean(!truthy(operand));
      operand.require_defined();
      if (!operand.is_number())
        throw EvalError(fmt::format("bad operand type for unary {}: '{}'", e.name, type_name(operand)));
      if (e.name == "+") return operand.kind() == Value::Kind::kBool ? Value::integer(operand.as_int()) : operand;
      if (operand.kind() == Value::Kind::kFloat) return Value::floating(-operand.as_float());
      return Value::integer(-operand.as_int());
    }
    case ExprKind::kBinary:
      return eval_binary(e);
    case ExprKind::kCompare:
      return eval_compare(e);
    case ExprKind::kCondition: {
      if (truthy(eval(*e.children[0]))) return eval(*e.children[1]);
      if (e.children[2]) return eval(*e.children[2]);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
    }
  }
  return {};
}

Value Evaluator::eval_binary(const Expr& e) {
  const Value left = eval(*e.children[0]);
  if (e.name == "and") return truthy(left) ? eval(*e.children[1]) : left;
  if (e.name == "or") return truthy(left) ? left : eval(*e.children[1]);
  return binary_op(e.name, left, eval(*e.children[1]));
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.children[0]);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.children[i + 1]);
    const std::string& op = e.ops[i];
    bool result = false;
    if (op == "==") {
      result = equals(left, right);
    } else if (op == "!=") {
      result = !equals(left, right);
    } else if (op == "<") {
      result = less_than(left, right, op);
    } else if (op == ">") {
      result = less_than(right, left, op);
    } else if (op == "<=") {
      result = !less_than(right, left, op);
    } else if (op == ">=") {
      result = !less_than(left, right, op);
    } else if (op == "in" || op == "notin") {
      result = contains(right, left) == (op == "in");
    }
    if (!result) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

// A filter call; in a filter block the innermost operand is the block's rendered body.
Value Evaluator::eval_filter(const Expr& e, const Value* block_operand) {
  Value operand;
  if (e.children[0]) {
    operand = e.children[0]->kind == ExprKind::kFilter && block_operand != nullptr
                  ? eval_filter(*e.children[0], block_operand)
                  : eval(*e.children[0]);
  } else {
    operand = *block_operand;
  }
  CallArgs args = eval_args(e, 1);
  try {
    return apply_filter(*this, e.name, operand, args);
  } catch (const EvalError& err) {
    throw JinjaError(e.line, err.what());
  }
}

Value Evaluator::call(const Value& callee, const CallArgs& args) {
  callee.require_defined();
  if (callee.kind() != Value::Kind::kCallable)
    throw EvalError(fmt::format("'{}' object is not callable", type_name(callee)));
  return callee.as_callable().call(*this, args);
}

Value Evaluator::get_attr(const Value& object, const std::string& name) {
  object.require_defined();
  if (std::optional<Value> method = bound_method(object, name)) return *method;
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(Value::string(name))) return *v;
  } else if (object.kind() == Value::Kind::kNamespace) {
    if (const Value* v = object.as_namespace().attrs.find(Value::string(name))) return *v;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(object), name));
}

Value Evaluator::get_item(const Value& object, const Value& key) {
  object.require_defined();
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(key)) return *v;
  } else if ((object.is_list() || object.is_string()) &&
             (key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool)) {
    std::int64_t index = key.as_int();
    if (object.is_list()) {
      const auto n = static_cast<std::int64_t>(object.as_list().items.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return object.as_list().items[static_cast<std::size_t>(index)];
    } else {
      const auto offsets = code_point_offsets(object.as_string());
      const auto n = static_cast<std::int64_t>(offsets.size()) - 1;
      if (index < 0) index += n;
      if (index >= 0 && index < n) {
        return Value::string(object.as_tainted().substr(offsets[index], offsets[index + 1]));
      }
    }
  }
  // jinja2 falls back to the attribute of that name (m['items'] is the dict method).
  if (key.is_string()) return get_attr(object, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(object), repr(key)));
}

}  // namespace serve8::jinja
