#include "tokenizer/jinja/ops.h"

#include <fmt/format.h>

#include <cmath>

#include "tokenizer/jinja/string.h"

namespace serve8::jinja {
namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw EvalError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

bool is_float_op(const Value& a, const Value& b) {
  return a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat;
}

Value repeat(const Value& seq, std::int64_t times) {
  if (seq.is_string()) {
    TaintedString out;
    for (std::int64_t i = 0; i < times; ++i) out.append(seq.as_tainted());
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  for (std::int64_t i = 0; i < times; ++i) {
    for (const Value& item : seq.as_list().items) items.push_back(item);
  }
  return Value::list(std::move(items), seq.as_list().is_tuple);
}

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_float_op(a, b)) return Value::floating(a.as_float() + b.as_float());
    return Value::integer(a.as_int() + b.as_int());
  }
  if (a.is_string()) {
    if (!b.is_string()) throw EvalError(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    TaintedString out = a.as_tainted();
    out.append(b.as_tainted());
    return Value::string(std::move(out));
  }
  if (a.is_list()) {
    if (!b.is_list() || b.as_list().is_tuple != a.as_list().is_tuple) {
      throw EvalError(fmt::format("can only concatenate {0} (not \"{1}\") to {0}", type_name(a), type_name(b)));
    }
    std::vector<Value> items = a.as_list().items;
    for (const Value& item : b.as_list().items) items.push_back(item);
    return Value::list(std::move(items), a.as_list().is_tuple);
  }
  unsupported("+", a, b);
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kBool)) {
      return repeat(a, b.as_int());
    }
    if ((b.is_string() || b.is_list()) && (a.kind() == Value::Kind::kInt || a.kind() == Value::Kind::kBool)) {
      return repeat(b, a.as_int());
    }
  }
  if (!a.is_number() || !b.is_number()) {
    if (op == "%" && a.is_string()) throw EvalError("printf-style string formatting is not supported");
    unsupported(op, a, b);
  }
  const bool floats = is_float_op(a, b);
  if (op == "-") return floats ? Value::floating(a.as_float() - b.as_float()) : Value::integer(a.as_int() - b.as_int());
  if (op == "*") return floats ? Value::floating(a.as_float() * b.as_float()) : Value::integer(a.as_int() * b.as_int());
  if (op == "/") {
    if (b.as_float() == 0.0) throw EvalError("division by zero");
    return Value::floating(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (b.as_float() == 0.0) {
      throw EvalError(floats ? (op == "//" ? "float floor division by zero" : "float modulo")
                             : "integer division or modulo by zero");
    }
    if (!floats) {
      const std::int64_t q = floor_div(a.as_int(), b.as_int());
      return Value::integer(op == "//" ? q : a.as_int() - q * b.as_int());
    }
    const double m = py_fmod(a.as_float(), b.as_float());
    return Value::floating(op == "%" ? m : std::round((a.as_float() - m) / b.as_float()));
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      std::int64_t result = 1;
      for (std::int64_t i = 0; i < b.as_int(); ++i) result *= a.as_int();
      return Value::integer(result);
    }
    return Value::floating(std::pow(a.as_float(), b.as_float()));
  }
  unsupported(op, a, b);
}

// Python's slice.indices(): clamps start/stop for the given length and step.
std::int64_t clamp_index(const Value* v, std::int64_t length, std::int64_t step, bool is_start) {
  if (v == nullptr || v->is_none()) {
    if (step > 0) return is_start ? 0 : length;
    return is_start ? length - 1 : -1;
  }
  if (v->kind() != Value::Kind::kInt && v->kind() != Value::Kind::kBool) {
    throw EvalError("slice indices must be integers or None or have an __index__ method");
  }
  std::int64_t i = v->as_int();
  if (i < 0) i += length;
  if (step > 0) return std::clamp<std::int64_t>(i, 0, length);
  return std::clamp<std::int64_t>(i, -1, length - 1);
}

}  // namespace

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& item : v.as_dict().items) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const auto offsets = code_point_offsets(v.as_string());
      for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::string(v.as_tainted().substr(offsets[i], offsets[i + 1])));
      }
      return chars;
    }
    default:
      throw EvalError(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    TaintedString out = to_str(a);
    out.append(to_str(b));
    return Value::string(std::move(out));
  }
  a.require_defined();
  b.require_defined();
  if (op == "+") return add(a, b);
  return arithmetic(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw EvalError(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& x : container.as_list().items) {
        if (equals(x, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      throw EvalError(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

Value slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  object.require_defined();
  std::int64_t step_value = 1;
  if (step != nullptr && !step->is_none()) {
    if (step->kind() != Value::Kind::kInt) throw EvalError("slice indices must be integers or None");
    step_value = step->as_int();
    if (step_value == 0) throw EvalError("slice step cannot be zero");
  }
  std::vector<std::size_t> offsets;
  std::int64_t length = 0;
  if (object.is_string()) {
    offsets = code_point_offsets(object.as_string());
    length = static_cast<std::int64_t>(offsets.size()) - 1;
  } else if (object.is_list()) {
    length = static_cast<std::int64_t>(object.as_list().items.size());
  } else {
    return Value::undefined(fmt::format("{} has no element slice", object_type_repr(object)));
  }
  const std::int64_t begin = clamp_index(start, length, step_value, true);
  const std::int64_t end = clamp_index(stop, length, step_value, false);
  std::vector<std::int64_t> picked;
  for (std::int64_t i = begin; step_value > 0 ? i < end : i > end; i += step_value) picked.push_back(i);
  if (object.is_string()) {
    const TaintedString& s = object.as_tainted();
    if (step_value == 1) {
      if (picked.empty()) return Value::string(std::string());
      return Value::string(s.substr(offsets[picked.front()], offsets[picked.back() + 1]));
    }
    // Reordered or skipped characters are new text: untrusted as a whole when any was.
    std::string out;
    for (std::int64_t i : picked) out += s.text().substr(offsets[i], offsets[i + 1] - offsets[i]);
    return Value::string(TaintedString(std::move(out), s.any_untrusted()));
  }
  std::vector<Value> items;
  for (std::int64_t i : picked) items.push_back(object.as_list().items[static_cast<std::size_t>(i)]);
  return Value::list(std::move(items), object.as_list().is_tuple);
}

}  // namespace serve8::jinja
