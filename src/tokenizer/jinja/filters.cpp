// jinja2's filters and tests, with Python's results (and the untrusted ranges kept where the text
// passes through unchanged: trim, join, string; anything rewritten is untrusted as a whole).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/string.h"

namespace serve8::jinja {

const Value* Params::get(std::size_t index, std::string_view name) const {
  if (index < args_.positional.size()) return &args_.positional[index];
  return args_.keyword_arg(name);
}

Value Params::get_or(std::size_t index, std::string_view name, Value fallback) const {
  const Value* v = get(index, name);
  return v != nullptr ? *v : fallback;
}

const Value& Params::required(std::size_t index, std::string_view name) const {
  const Value* v = get(index, name);
  if (v == nullptr) throw EvalError(fmt::format("{}() missing required argument: '{}'", function_, name));
  return *v;
}

namespace {

// A string value transformed as a whole: untrusted when any input was.
Value rewritten(std::string text, bool untrusted) { return Value::string(TaintedString(std::move(text), untrusted)); }

std::size_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return num_code_points(v.as_string());
    case Value::Kind::kList:
      return v.as_list().items.size();
    case Value::Kind::kDict:
      return v.as_dict().items.size();
    default:
      throw EvalError(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

// jinja2's attribute getter for map/selectattr/sort: "a.b" and "0" walk items and indexes.
Value attribute_of(Evaluator& ev, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return ev.get_item(item, attribute);
  Value v = item;
  for (const StripRange& part : split_ranges(attribute.as_string(), ".", -1)) {
    const std::string key = attribute.as_string().substr(part.begin, part.end - part.begin);
    const bool numeric =
        !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = ev.get_item(v, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
  }
  return v;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

std::optional<double> parse_py_float(const std::string& text) {
  const StripRange r = strip_range(text, {}, true, true);
  std::string s = text.substr(r.begin, r.end - r.begin);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

std::optional<std::int64_t> parse_py_int(const std::string& text, int base) {
  const StripRange r = strip_range(text, {}, true, true);
  std::string s = text.substr(r.begin, r.end - r.begin);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(s.c_str(), &end, base);
  if (end != s.c_str() + s.size() || errno != 0) return std::nullopt;
  return i;
}

Value filter_int(const Value& v, const Params& p) {
  const Value fallback = p.get_or(0, "default", Value::integer(0));
  if (v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool) return Value::integer(v.as_int());
  if (v.kind() == Value::Kind::kFloat) {
    return std::isfinite(v.as_float()) ? Value::integer(static_cast<std::int64_t>(v.as_float())) : fallback;
  }
  if (!v.is_string()) return fallback;
  const Value base = p.get_or(1, "base", Value::integer(10));
  if (auto i = parse_py_int(v.as_string(), static_cast<int>(base.as_int()))) return Value::integer(*i);
  if (auto d = parse_py_float(v.as_string()); d && std::isfinite(*d))
    return Value::integer(static_cast<std::int64_t>(*d));
  return fallback;
}

Value filter_float(const Value& v, const Params& p) {
  const Value fallback = p.get_or(0, "default", Value::floating(0.0));
  if (v.is_number()) return Value::floating(v.as_float());
  if (!v.is_string()) return fallback;
  if (auto d = parse_py_float(v.as_string())) return Value::floating(*d);
  return fallback;
}

Value filter_tojson(const Value& v, const Params& p) {
  JsonOptions options;
  options.ensure_ascii = truthy(p.get_or(0, "ensure_ascii", Value::boolean(false)));
  const Value indent = p.get_or(1, "indent", Value::none());
  if (indent.is_string()) {
    options.indent = indent.as_string();
  } else if (indent.is_number()) {
    options.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, indent.as_int())), ' ');
  }
  const Value separators = p.get_or(2, "separators", Value::none());
  if (separators.is_list() && separators.as_list().items.size() == 2) {
    options.item_separator = to_str(separators.as_list().items[0]).text();
    options.key_separator = to_str(separators.as_list().items[1]).text();
  }
  options.sort_keys = truthy(p.get_or(3, "sort_keys", Value::boolean(false)));
  return rewritten(to_json(v, options), contains_untrusted(v));
}

Value filter_join(Evaluator& ev, const Value& v, const Params& p) {
  const Value separator = p.get_or(0, "d", Value::string(std::string()));
  const Value* attribute = p.get(1, "attribute");
  TaintedString out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out.append(to_str(separator));
    first = false;
    out.append(to_str(attribute != nullptr ? attribute_of(ev, item, *attribute) : item));
  }
  return Value::string(std::move(out));
}

// select/reject/selectattr/rejectattr: items whose (attribute's) test result is `keep`.
Value filter_select(Evaluator& ev, const Value& v, const CallArgs& args, bool by_attribute, bool keep) {
  std::size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw EvalError("selectattr() missing the attribute name");
    attribute = args.positional[next++];
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) test = to_str(args.positional[next++]).text();
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  std::vector<Value> kept;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? attribute_of(ev, item, attribute) : item;
    const bool passed = test ? apply_test(ev, *test, subject, test_args) : truthy(subject);
    if (passed == keep) kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Value filter_map(Evaluator& ev, const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  if (!args.positional.empty()) {
    const std::string filter = to_str(args.positional[0]).text();
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : iterate(v)) out.push_back(apply_filter(ev, filter, item, rest));
    return Value::list(std::move(out));
  }
  const Value* attribute = args.keyword_arg("attribute");
  if (attribute == nullptr) throw EvalError("map() needs a filter name or attribute=");
  const Value* fallback = args.keyword_arg("default");
  for (const Value& item : iterate(v)) {
    Value x = attribute_of(ev, item, *attribute);
    if (x.is_undefined() && fallback != nullptr) x = *fallback;
    out.push_back(std::move(x));
  }
  return Value::list(std::move(out));
}

Value filter_sort(Evaluator& ev, const Value& v, const Params& p) {
  const bool reverse = truthy(p.get_or(0, "reverse", Value::boolean(false)));
  const bool case_sensitive = truthy(p.get_or(1, "case_sensitive", Value::boolean(false)));
  const Value* attribute = p.get(2, "attribute");
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = sort_key(attribute != nullptr ? attribute_of(ev, item, *attribute) : item, case_sensitive);
    keyed.emplace_back(std::move(key), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first, "<") : less_than(a.first, b.first, "<");
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value filter_unique(Evaluator& ev, const Value& v, const Params& p) {
  const bool case_sensitive = truthy(p.get_or(0, "case_sensitive", Value::boolean(false)));
  const Value* attribute = p.get(1, "attribute");
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(attribute != nullptr ? attribute_of(ev, item, *attribute) : item, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value filter_round(const Value& v, const Params& p) {
  const std::int64_t precision = p.get_or(0, "precision", Value::integer(0)).as_int();
  const std::string method = to_str(p.get_or(1, "method", Value::string("common"))).text();
  if (v.kind() == Value::Kind::kInt && method == "common") return v;
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * scale;
  // Python's round() ties to even; floor and ceil are jinja2's other methods.
  const double r = method == "floor" ? std::floor(x) : (method == "ceil" ? std::ceil(x) : std::nearbyint(x));
  return Value::floating(r / scale);
}

Value filter_min_max(Evaluator& ev, const Value& v, const Params& p, bool want_max) {
  const bool case_sensitive = truthy(p.get_or(0, "case_sensitive", Value::boolean(false)));
  const Value* attribute = p.get(1, "attribute");
  std::optional<Value> best;
  std::optional<Value> best_key;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(attribute != nullptr ? attribute_of(ev, item, *attribute) : item, case_sensitive);
    if (!best || (want_max ? less_than(*best_key, key, "<") : less_than(key, *best_key, "<"))) {
      best = item;
      best_key = std::move(key);
    }
  }
  if (!best) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  return *best;
}

constexpr std::string_view kFilterNames[] = {
    "default",  "d",    "length", "count",  "tojson",     "safe",       "string",     "list", "int",
    "float",    "join", "map",    "select", "reject",     "selectattr", "rejectattr", "sort", "unique",
    "round",    "min",  "max",    "items",  "first",      "last",       "reverse",    "abs",  "sum",
    "dictsort", "trim", "upper",  "lower",  "capitalize", "title",      "replace"};
constexpr std::string_view kTestNames[] = {
    "defined", "undefined",   "none",     "string",   "mapping",  "number", "integer", "float",       "boolean",
    "true",    "false",       "callable", "iterable", "sequence", "odd",    "even",    "divisibleby", "lower",
    "upper",   "eq",          "equalto",  "==",       "ne",       "!=",     "lt",      "lessthan",    "<",
    "gt",      "greaterthan", ">",        "le",       "<=",       "ge",     ">=",      "in",          "sameas"};

}  // namespace

bool is_filter_name(std::string_view name) {
  return std::find(std::begin(kFilterNames), std::end(kFilterNames), name) != std::end(kFilterNames);
}

bool is_test_name(std::string_view name) {
  return std::find(std::begin(kTestNames), std::end(kTestNames), name) != std::end(kTestNames);
}

Value apply_filter(Evaluator& ev, std::string_view name, const Value& v, const CallArgs& args) {
  const Params p(args, name);
  if (name == "default" || name == "d") {
    const bool boolean = truthy(p.get_or(1, "boolean", Value::boolean(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return p.get_or(0, "default_value", Value::string(std::string()));
    return v;
  }
  if (name == "length" || name == "count") return Value::integer(static_cast<std::int64_t>(length_of(v)));
  if (name == "tojson") return filter_tojson(v, p);
  if (name == "safe") return v;
  if (name == "string") return Value::string(to_str(v));
  if (name == "list") return Value::list(iterate(v));
  if (name == "int") return filter_int(v, p);
  if (name == "float") return filter_float(v, p);
  if (name == "join") return filter_join(ev, v, p);
  if (name == "map") return filter_map(ev, v, args);
  if (name == "select" || name == "reject") return filter_select(ev, v, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return filter_select(ev, v, args, true, name == "selectattr");
  if (name == "sort") return filter_sort(ev, v, p);
  if (name == "unique") return filter_unique(ev, v, p);
  if (name == "round") return filter_round(v.require_defined(), p);
  if (name == "min" || name == "max") return filter_min_max(ev, v, p, name == "max");
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw EvalError("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [key, value] : v.as_dict().items) pairs.push_back(Value::list({key, value}, true));
    return Value::list(std::move(pairs));
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<Value> chars = iterate(v);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
      return rewritten(std::move(out), v.as_tainted().any_untrusted());
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "abs") {
    v.require_defined();
    if (v.kind() == Value::Kind::kFloat) return Value::floating(std::fabs(v.as_float()));
    if (v.is_number()) return Value::integer(std::llabs(v.as_int()));
    throw EvalError(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
  }
  if (name == "sum") {
    Value total = p.get_or(1, "start", Value::integer(0));
    const Value* attribute = p.get(0, "attribute");
    for (const Value& item : iterate(v)) {
      total = binary_op("+", total, attribute != nullptr ? attribute_of(ev, item, *attribute) : item);
    }
    return total;
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw EvalError("You can only sort by either \"key\" or \"value\"");
    const bool case_sensitive = truthy(p.get_or(0, "case_sensitive", Value::boolean(false)));
    const bool by_value = to_str(p.get_or(1, "by", Value::string("key"))).text() == "value";
    const bool reverse = truthy(p.get_or(2, "reverse", Value::boolean(false)));
    std::vector<std::pair<Value, Value>> items = v.as_dict().items;
    std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
      const Value ka = sort_key(by_value ? a.second : a.first, case_sensitive);
      const Value kb = sort_key(by_value ? b.second : b.first, case_sensitive);
      return reverse ? less_than(kb, ka, "<") : less_than(ka, kb, "<");
    });
    std::vector<Value> out;
    for (auto& [key, value] : items) out.push_back(Value::list({key, value}, true));
    return Value::list(std::move(out));
  }
  // The string filters work on str(value).
  const TaintedString s = to_str(v);
  if (name == "trim") {
    const Value chars = p.get_or(0, "chars", Value::none());
    const StripRange r = strip_range(s.text(), chars.is_string() ? chars.as_string() : "", true, true);
    return Value::string(s.substr(r.begin, r.end));
  }
  if (name == "upper") return rewritten(py_upper(s.text()), s.any_untrusted());
  if (name == "lower") return rewritten(py_lower(s.text()), s.any_untrusted());
  if (name == "capitalize") return rewritten(py_capitalize(s.text()), s.any_untrusted());
  if (name == "title") return rewritten(jinja_title(s.text()), s.any_untrusted());
  if (name == "replace") {
    const TaintedString old = to_str(p.required(0, "old"));
    const TaintedString replacement = to_str(p.required(1, "new"));
    const Value count = p.get_or(2, "count", Value::none());
    const bool untrusted = s.any_untrusted() || old.any_untrusted() || replacement.any_untrusted();
    return rewritten(py_replace(s.text(), old.text(), replacement.text(), count.is_none() ? -1 : count.as_int()),
                     untrusted);
  }
  throw EvalError(fmt::format("No filter named '{}'.", name));
}

bool apply_test(Evaluator& ev, std::string_view name, const Value& v, const CallArgs& args) {
  using Kind = Value::Kind;
  const Params p(args, name);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.as_bool();
  if (name == "false") return v.kind() == Kind::kBool && !v.as_bool();
  if (name == "callable") return v.kind() == Kind::kCallable;
  // Undefined iterates as empty and has a length, so jinja2 counts it as iterable and a sequence.
  if (name == "iterable" || name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  }
  if (name == "odd" || name == "even") {
    const Value r = binary_op("%", v, Value::integer(2));
    return truthy(r) == (name == "odd");
  }
  if (name == "divisibleby") return !truthy(binary_op("%", v, p.required(0, "num")));
  if (name == "lower" || name == "upper") {
    const std::string text = to_str(v).text();
    return name == "lower" ? py_lower(text) == text : py_upper(text) == text;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, p.required(0, "other"));
  if (name == "ne" || name == "!=") return !equals(v, p.required(0, "other"));
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, p.required(0, "other"), "<");
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(p.required(0, "other"), v, ">");
  if (name == "le" || name == "<=") return !less_than(p.required(0, "other"), v, "<=");
  if (name == "ge" || name == ">=") return !less_than(v, p.required(0, "other"), ">=");
  if (name == "in") return contains(p.required(0, "seq"), v);
  if (name == "sameas") {
    const Value& other = p.required(0, "other");
    if (v.kind() != other.kind()) return false;
    return v.is_none() || v.kind() == Kind::kBool ? equals(v, other) : &v == &other;
  }
  (void)ev;
  throw EvalError(fmt::format("No test named '{}'.", name));
}

}  // namespace serve8::jinja
