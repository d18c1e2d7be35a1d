// jinja2's builtin filters and tests, the Python str/dict/list methods templates call, and the
// globals HF's environment adds (raise_exception, strftime_now, namespace, dict, range).
#pragma once

#include <optional>
#include <string_view>

#include "tokenizer/jinja/eval.h"
#include "tokenizer/jinja/value.h"

namespace serve8::jinja {

// Both throw EvalError with jinja2's message for an unknown name or bad arguments.
Value apply_filter(Evaluator& ev, std::string_view name, const Value& operand, const CallArgs& args);
bool apply_test(Evaluator& ev, std::string_view name, const Value& operand, const CallArgs& args);

// Whether jinja2 (with HF's environment) has a filter or test of that name: jinja2 rejects
// unknown ones when it compiles the template, so we check them at parse time too.
bool is_filter_name(std::string_view name);
bool is_test_name(std::string_view name);

// The method `name` of a str, dict or list bound to receiver, or nullopt when it has none.
std::optional<Value> bound_method(const Value& receiver, std::string_view name);

Dict make_globals();

// Positional-or-keyword parameter access with Python's rules, for builtins' argument lists.
class Params {
 public:
  Params(const CallArgs& args, std::string_view function) : args_(args), function_(function) {}
  // Parameter `index` (after the operand) by position or by name; nullptr when not passed.
  const Value* get(std::size_t index, std::string_view name) const;
  Value get_or(std::size_t index, std::string_view name, Value fallback) const;
  const Value& required(std::size_t index, std::string_view name) const;

 private:
  const CallArgs& args_;
  std::string_view function_;
};

}  // namespace serve8::jinja
