// The Python methods chat templates call on strings, dicts and lists ("content.strip()",
// "message.get('x')"), and the globals of HF's environment.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/string.h"

namespace serve8::jinja {
namespace {

using Method = Value (*)(Evaluator&, const Value&, const Params&);

Value rewritten(std::string text, bool untrusted) { return Value::string(TaintedString(std::move(text), untrusted)); }

std::string chars_arg(const Params& p) {
  const Value chars = p.get_or(0, "chars", Value::none());
  return chars.is_none() ? std::string() : to_str(chars).text();
}

Value strip_method(const Value& s, const Params& p, bool left, bool right) {
  const StripRange r = strip_range(s.as_string(), chars_arg(p), left, right);
  return Value::string(s.as_tainted().substr(r.begin, r.end));
}

// startswith/endswith take one prefix or a tuple of them.
bool affix_matches(const Value& s, const Value& affix, bool prefix) {
  if (affix.is_list()) {
    for (const Value& a : affix.as_list().items) {
      if (affix_matches(s, a, prefix)) return true;
    }
    return false;
  }
  if (!affix.is_string()) throw EvalError("startswith first arg must be str or a tuple of str");
  return prefix ? s.as_string().starts_with(affix.as_string()) : s.as_string().ends_with(affix.as_string());
}

Value split_method(const Value& s, const Params& p) {
  const Value sep = p.get_or(0, "sep", Value::none());
  const Value maxsplit = p.get_or(1, "maxsplit", Value::integer(-1));
  if (sep.is_string() && sep.as_string().empty()) throw EvalError("empty separator");
  std::vector<Value> parts;
  for (const StripRange& r : split_ranges(s.as_string(), sep.is_none() ? "" : to_str(sep).text(), maxsplit.as_int())) {
    parts.push_back(Value::string(s.as_tainted().substr(r.begin, r.end)));
  }
  return Value::list(std::move(parts));
}

Value str_method(std::string_view name, const Value& s, const Params& p) {
  const std::string& text = s.as_string();
  const bool untrusted = s.as_tainted().any_untrusted();
  if (name == "strip") return strip_method(s, p, true, true);
  if (name == "lstrip") return strip_method(s, p, true, false);
  if (name == "rstrip") return strip_method(s, p, false, true);
  if (name == "startswith") return Value::boolean(affix_matches(s, p.required(0, "prefix"), true));
  if (name == "endswith") return Value::boolean(affix_matches(s, p.required(0, "suffix"), false));
  if (name == "split") return split_method(s, p);
  if (name == "upper") return rewritten(py_upper(text), untrusted);
  if (name == "lower") return rewritten(py_lower(text), untrusted);
  if (name == "title") return rewritten(py_title(text), untrusted);
  if (name == "capitalize") return rewritten(py_capitalize(text), untrusted);
  if (name == "replace") {
    const TaintedString old = to_str(p.required(0, "old"));
    const TaintedString replacement = to_str(p.required(1, "new"));
    const std::int64_t count = p.get_or(2, "count", Value::integer(-1)).as_int();
    return rewritten(py_replace(text, old.text(), replacement.text(), count),
                     untrusted || old.any_untrusted() || replacement.any_untrusted());
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string affix = to_str(p.required(0, name == "removeprefix" ? "prefix" : "suffix")).text();
    if (name == "removeprefix" && text.starts_with(affix))
      return Value::string(s.as_tainted().substr(affix.size(), text.size()));
    if (name == "removesuffix" && !affix.empty() && text.ends_with(affix)) {
      return Value::string(s.as_tainted().substr(0, text.size() - affix.size()));
    }
    return s;
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const std::string sub = to_str(p.required(0, "sub")).text();
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<std::int64_t>(num_code_points(text) + 1));
      std::int64_t n = 0;
      for (std::size_t pos = text.find(sub); pos != std::string::npos; pos = text.find(sub, pos + sub.size())) ++n;
      return Value::integer(n);
    }
    const std::size_t pos = name == "find" ? text.find(sub) : text.rfind(sub);
    if (pos == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<std::int64_t>(num_code_points(std::string_view(text).substr(0, pos))));
  }
  if (name == "join") {
    TaintedString out;
    const std::vector<Value> items = iterate(p.required(0, "iterable"));
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        throw EvalError(fmt::format("sequence item {}: expected str instance, {} found", i, type_name(items[i])));
      }
      if (i > 0) out.append(s.as_tainted());
      out.append(items[i].as_tainted());
    }
    return Value::string(std::move(out));
  }
  bool all = !text.empty();
  for (std::size_t pos = 0; pos < text.size();) {
    const char32_t c = decode_code_point(text, pos);
    if (name == "isspace") all = all && is_py_space(c);
    if (name == "isdigit") all = all && c >= '0' && c <= '9';
    if (name == "isalpha") all = all && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    if (name == "isalnum") all = all && (((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9'));
  }
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") return Value::boolean(all);
  if (name == "islower") return Value::boolean(py_lower(text) == text && py_upper(text) != text);
  if (name == "isupper") return Value::boolean(py_upper(text) == text && py_lower(text) != text);
  throw EvalError(fmt::format("'str' object has no attribute '{}'", name));
}

Value dict_method(std::string_view name, const Value& d, const Params& p) {
  if (name == "get") {
    const Value* v = d.as_dict().find(p.required(0, "key"));
    return v != nullptr ? *v : p.get_or(1, "default", Value::none());
  }
  std::vector<Value> out;
  for (const auto& [key, value] : d.as_dict().items) {
    if (name == "keys") out.push_back(key);
    if (name == "values") out.push_back(value);
    if (name == "items") out.push_back(Value::list({key, value}, true));
  }
  return Value::list(std::move(out));
}

Value list_method(std::string_view name, const Value& l, const Params& p) {
  const Value& x = p.required(0, "value");
  const auto& items = l.as_list().items;
  std::int64_t count = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], x)) continue;
    if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
    ++count;
  }
  if (name == "index") throw EvalError(fmt::format("{} is not in list", repr(x)));
  return Value::integer(count);
}

bool is_method(const Value& receiver, std::string_view name) {
  static constexpr std::string_view kStr[] = {
      "strip", "lstrip",     "rstrip",  "startswith",   "endswith",     "split",   "upper",  "lower",
      "title", "capitalize", "replace", "removeprefix", "removesuffix", "find",    "rfind",  "count",
      "join",  "isspace",    "isdigit", "isalpha",      "isalnum",      "islower", "isupper"};
  static constexpr std::string_view kDict[] = {"get", "keys", "values", "items"};
  static constexpr std::string_view kList[] = {"index", "count"};
  const auto has = [name](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  if (receiver.is_string()) return has(kStr);
  if (receiver.is_dict()) return has(kDict);
  if (receiver.is_list()) return has(kList);
  return false;
}

std::string format_now(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buffer(format.size() * 8 + 64, '\0');
  const std::size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &local);
  buffer.resize(n);
  return buffer;
}

}  // namespace

std::optional<Value> bound_method(const Value& receiver, std::string_view name) {
  if (!is_method(receiver, name)) return std::nullopt;
  std::string method(name);
  return Value::callable(method, [receiver, method](Evaluator&, const CallArgs& args) {
    const Params p(args, method);
    if (receiver.is_string()) return str_method(method, receiver, p);
    if (receiver.is_dict()) return dict_method(method, receiver, p);
    return list_method(method, receiver, p);
  });
}

Dict make_globals() {
  Dict globals;
  const auto add = [&globals](const char* name, std::function<Value(Evaluator&, const CallArgs&)> fn) {
    globals.items.emplace_back(Value::string(name), Value::callable(name, std::move(fn)));
  };
  add("raise_exception", [](Evaluator&, const CallArgs& args) -> Value {
    throw EvalError(args.positional.empty() ? std::string() : to_str(args.positional[0]).text());
  });
  add("strftime_now", [](Evaluator&, const CallArgs& args) {
    return Value::string(format_now(to_str(Params(args, "strftime_now").required(0, "format")).text()));
  });
  // namespace(...) and dict(...) take a mapping and/or keyword arguments, as Python's dict() does.
  const auto build_dict = [](const CallArgs& args) {
    Dict d;
    if (!args.positional.empty() && args.positional[0].is_dict()) d = args.positional[0].as_dict();
    for (const auto& [key, value] : args.keyword) d.set(Value::string(key), value);
    return d;
  };
  add("namespace",
      [build_dict](Evaluator&, const CallArgs& args) { return Value::namespace_object(build_dict(args)); });
  add("dict", [build_dict](Evaluator&, const CallArgs& args) { return Value::dict(build_dict(args)); });
  add("range", [](Evaluator&, const CallArgs& args) {
    std::int64_t start = 0;
    std::int64_t stop = 0;
    std::int64_t step = 1;
    const auto& a = args.positional;
    if (a.empty() || a.size() > 3) throw EvalError("range expected at least 1 argument");
    for (const Value& v : a) {
      if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
        throw EvalError(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
      }
    }
    if (a.size() == 1) {
      stop = a[0].as_int();
    } else {
      start = a[0].as_int();
      stop = a[1].as_int();
      if (a.size() == 3) step = a[2].as_int();
    }
    if (step == 0) throw EvalError("range() arg 3 must not be zero");
    std::vector<Value> items;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (items.size() >= 100000)
        throw EvalError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      items.push_back(Value::integer(i));
    }
    return Value::list(std::move(items));
  });
  return globals;
}

}  // namespace serve8::jinja
