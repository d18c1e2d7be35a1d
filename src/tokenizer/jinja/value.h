// The values a Jinja chat template computes with, modelled on the Python objects jinja2 hands its
// templates (str, int, float, bool, None, list, tuple, dict, jinja2's Undefined and Namespace), so
// that printing, comparing and testing them matches what HF's renderer produces. Strings carry the
// byte ranges that came from the request (see ChatSegment::trusted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace serve8::jinja {

// A failure while rendering: a Python exception in jinja2 (TypeError, UndefinedError, the
// TemplateError of raise_exception). The evaluator adds the template line.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& what) : std::runtime_error(what) {}
};

// A byte range [begin, end) of a string.
struct ByteSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const ByteSpan&) const = default;
};

// UTF-8 text plus the sorted, disjoint, non-adjacent byte ranges of it that came from the request.
class TaintedString {
 public:
  TaintedString() = default;
  explicit TaintedString(std::string text, bool untrusted = false);

  const std::string& text() const { return text_; }
  const std::vector<ByteSpan>& untrusted() const { return untrusted_; }
  bool any_untrusted() const { return !untrusted_.empty(); }

  void append(const TaintedString& other);
  void append_trusted(std::string_view text) { text_ += text; }
  void append_untrusted(std::string_view text);
  // Bytes [begin, end): the untrusted ranges are cropped to it.
  TaintedString substr(std::size_t begin, std::size_t end) const;
  void mark_all_untrusted();

 private:
  void add_span(std::size_t begin, std::size_t end);

  std::string text_;
  std::vector<ByteSpan> untrusted_;
};

class Value;
class Evaluator;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;  // only printing tells a tuple from a list: ('a', 1)
};

// A Python dict: insertion ordered; keys compare as Python's == does (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);
};

// jinja2's namespace(): the one mutable object templates have ({% set ns.x = ... %}), shared by
// reference like the Python object.
struct Namespace {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* keyword_arg(std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(Evaluator&, const CallArgs&)> call;
};

// jinja2's default Undefined: prints as "", is falsy and iterates as empty, and fails with its
// hint ("'x' is undefined", "'dict object' has no attribute 'content'") when used in arithmetic,
// attribute access or a call.
struct Undefined {
  std::string hint;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() : data_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(nullptr); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(std::int64_t i) { return Value(i); }
  static Value floating(double f) { return Value(f); }
  static Value string(TaintedString s) { return Value(std::make_shared<const TaintedString>(std::move(s))); }
  static Value string(std::string s) { return string(TaintedString(std::move(s))); }
  static Value untrusted_string(std::string s) { return string(TaintedString(std::move(s), true)); }
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(Dict d) { return Value(std::make_shared<const Dict>(std::move(d))); }
  static Value namespace_object(Dict attrs);
  static Value callable(std::string name, std::function<Value(Evaluator&, const CallArgs&)> fn);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  // int, float and bool: Python's bool is an int.
  bool is_number() const { return kind() == Kind::kBool || kind() == Kind::kInt || kind() == Kind::kFloat; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const;  // bool or int
  double as_float() const;      // any number
  const TaintedString& as_tainted() const { return *std::get<StringPtr>(data_); }
  const std::string& as_string() const { return as_tainted().text(); }
  const List& as_list() const { return *std::get<ListPtr>(data_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(data_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }

  // Raises the undefined's UndefinedError when this is undefined.
  const Value& require_defined() const;

 private:
  using StringPtr = std::shared_ptr<const TaintedString>;
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using NamespacePtr = std::shared_ptr<Namespace>;
  using CallablePtr = std::shared_ptr<const Callable>;
  // The alternatives are in Kind's order.
  using Data = std::variant<Undefined, std::nullptr_t, bool, std::int64_t, double, StringPtr, ListPtr, DictPtr,
                            NamespacePtr, CallablePtr>;
  explicit Value(Data data) : data_(std::move(data)) {}

  Data data_;
};

// Python's name for the value's type, as error messages spell it: "str", "int", "NoneType", ...
std::string type_name(const Value& v);
// jinja2's object_type_repr, used in undefined hints: "dict object", "None", ...
std::string object_type_repr(const Value& v);

bool truthy(const Value& v);
// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's <, for numbers, strings and lists; TypeError otherwise.
bool less_than(const Value& a, const Value& b, std::string_view op);

// str(v) as jinja2 prints it (Undefined prints empty); a string keeps its untrusted ranges, any
// other value is untrusted as a whole when a string inside it is.
TaintedString to_str(const Value& v);
std::string repr(const Value& v);
// Whether any string reachable from v (list items, dict keys and values) came from the request.
bool contains_untrusted(const Value& v);
// Every string reachable from v marked untrusted: for values taken from the request.
Value mark_untrusted(const Value& v);

// Python's repr of a float ("1.0", "1e-05", "1.2345678901234568e+17", "inf", "nan").
std::string format_float(double f);
// Python's repr of a str (quotes chosen and characters escaped as Python does).
std::string repr_string(std::string_view s);

}  // namespace serve8::jinja
