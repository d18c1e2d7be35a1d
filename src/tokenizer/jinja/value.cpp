#include "tokenizer/jinja/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "tokenizer/jinja/string.h"

namespace serve8::jinja {

// ---- TaintedString ----

TaintedString::TaintedString(std::string text, bool untrusted) : text_(std::move(text)) {
  if (untrusted) add_span(0, text_.size());
}

void TaintedString::add_span(std::size_t begin, std::size_t end) {
  if (begin >= end) return;
  if (!untrusted_.empty() && untrusted_.back().end >= begin) {
    untrusted_.back().end = std::max(untrusted_.back().end, end);
  } else {
    untrusted_.push_back({begin, end});
  }
}

void TaintedString::append(const TaintedString& other) {
  const std::size_t offset = text_.size();
  text_ += other.text_;
  for (const ByteSpan& span : other.untrusted_) add_span(offset + span.begin, offset + span.end);
}

void TaintedString::append_untrusted(std::string_view text) {
  const std::size_t offset = text_.size();
  text_ += text;
  add_span(offset, text_.size());
}

TaintedString TaintedString::substr(std::size_t begin, std::size_t end) const {
  TaintedString out(text_.substr(begin, end - begin));
  for (const ByteSpan& span : untrusted_) {
    const std::size_t b = std::max(span.begin, begin);
    const std::size_t e = std::min(span.end, end);
    if (b < e) out.add_span(b - begin, e - begin);
  }
  return out;
}

void TaintedString::mark_all_untrusted() {
  untrusted_.clear();
  add_span(0, text_.size());
}

// ---- containers ----

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::keyword_arg(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  return Value(std::make_shared<const List>(List{std::move(items), is_tuple}));
}

Value Value::namespace_object(Dict attrs) { return Value(std::make_shared<Namespace>(Namespace{std::move(attrs)})); }

Value Value::callable(std::string name, std::function<Value(Evaluator&, const CallArgs&)> fn) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)}));
}

std::int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<std::int64_t>(data_);
}

double Value::as_float() const {
  if (kind() == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const Value& Value::require_defined() const {
  if (is_undefined()) throw EvalError(undefined_hint());
  return *this;
}

// ---- Python semantics ----

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.kind() == Value::Kind::kNamespace) return "jinja2.utils.Namespace object";
  std::string out = type_name(v);
  out += " object";
  return out;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().items.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      break;  // handled above
  }
  return false;
}

bool less_than(const Value& a, const Value& b, std::string_view op) {
  a.require_defined();
  b.require_defined();
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  throw EvalError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);
  // sci is "-d.ddde+XX": split into sign, digits and the decimal exponent.
  std::size_t pos = 0;
  std::string out;
  if (sci[0] == '-') {
    out += '-';
    pos = 1;
  }
  const std::size_t e_pos = sci.find('e');
  std::string digits;
  for (std::size_t i = pos; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  const int decpt = exponent + 1;  // digits are 0.d1d2... * 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= ndigits) {
      out += digits;
      out.append(static_cast<std::size_t>(decpt - ndigits), '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
    return out;
  }
  out += digits[0];
  if (ndigits > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

namespace {

// Python's str.isprintable(), approximated: the controls, separators and format characters that
// show up in text, plus surrogates and private use.
bool is_py_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x61C || c == 0x180E || c == 0x1680 || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0x600 && c <= 0x605) || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || (c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  return c < 0xF0000;
}

void append_list_repr(std::string& out, const List& list) {
  out += list.is_tuple ? '(' : '[';
  for (std::size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out += ", ";
    out += repr(list.items[i]);
  }
  if (list.is_tuple && list.items.size() == 1) out += ',';
  out += list.is_tuple ? ')' : ']';
}

void append_dict_repr(std::string& out, const Dict& dict) {
  out += '{';
  for (std::size_t i = 0; i < dict.items.size(); ++i) {
    if (i > 0) out += ", ";
    out += repr(dict.items[i].first);
    out += ": ";
    out += repr(dict.items[i].second);
  }
  out += '}';
}

}  // namespace

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t start = pos;
    const char32_t c = decode_code_point(s, pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_py_printable(c)) {
      out += s.substr(start, pos - start);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out += quote;
  return out;
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kString:
      return repr_string(v.as_string());
    default:
      return to_str(v).text();
  }
}

TaintedString to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kNone:
      return TaintedString("None");
    case Value::Kind::kBool:
      return TaintedString(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt:
      return TaintedString(std::to_string(v.as_int()));
    case Value::Kind::kFloat:
      return TaintedString(format_float(v.as_float()));
    case Value::Kind::kString:
      return v.as_tainted();
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out;
      if (v.is_list()) {
        append_list_repr(out, v.as_list());
      } else if (v.is_dict()) {
        append_dict_repr(out, v.as_dict());
      } else {
        out += "<Namespace ";
        append_dict_repr(out, v.as_namespace().attrs);
        out += '>';
      }
      return TaintedString(std::move(out), contains_untrusted(v));
    }
    case Value::Kind::kCallable: {
      std::string out = "<function ";
      out += v.as_callable().name;
      out += '>';
      return TaintedString(std::move(out));
    }
  }
  return {};
}

bool contains_untrusted(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return v.as_tainted().any_untrusted();
    case Value::Kind::kList:
      for (const Value& item : v.as_list().items) {
        if (contains_untrusted(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const Dict& d = v.is_dict() ? v.as_dict() : v.as_namespace().attrs;
      for (const auto& [key, value] : d.items) {
        if (contains_untrusted(key) || contains_untrusted(value)) return true;
      }
      return false;
    }
    default:
      return false;
  }
}

Value mark_untrusted(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString: {
      TaintedString s = v.as_tainted();
      s.mark_all_untrusted();
      return Value::string(std::move(s));
    }
    case Value::Kind::kList: {
      std::vector<Value> items;
      for (const Value& item : v.as_list().items) items.push_back(mark_untrusted(item));
      return Value::list(std::move(items), v.as_list().is_tuple);
    }
    case Value::Kind::kDict: {
      Dict d;
      for (const auto& [key, value] : v.as_dict().items)
        d.items.emplace_back(mark_untrusted(key), mark_untrusted(value));
      return Value::dict(std::move(d));
    }
    default:
      return v;
  }
}

}  // namespace serve8::jinja
