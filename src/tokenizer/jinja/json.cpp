#include "tokenizer/jinja/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/string.h"

namespace serve8::jinja {
namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t start = pos;
    const char32_t c = decode_code_point(s, pos);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else if (ensure_ascii && c >= 0x80) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 | (v >> 10)),
                               static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          out += s.substr(start, pos - start);
        }
    }
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return format_float(f);
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.as_string();
    case Value::Kind::kBool:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kFloat:
      return json_float(key.as_float());
    case Value::Kind::kNone:
      return "null";
    default:
      throw EvalError(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(key)));
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& options)
      : options_(options),
        item_separator_(options.item_separator.value_or(options.indent ? "," : ", ")),
        key_separator_(options.key_separator.value_or(": ")) {}

  void write(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return;
      case Value::Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out_ += json_float(v.as_float());
        return;
      case Value::Kind::kString:
        append_json_string(out_, v.as_string(), options_.ensure_ascii);
        return;
      case Value::Kind::kList: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_ += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out_ += item_separator_;
          newline(depth + 1);
          write(items[i], depth + 1);
        }
        newline(depth);
        out_ += ']';
        return;
      }
      case Value::Kind::kDict: {
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [key, value] : v.as_dict().items) items.emplace_back(json_key(key), &value);
        if (options_.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        if (items.empty()) {
          out_ += "{}";
          return;
        }
        out_ += '{';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out_ += item_separator_;
          newline(depth + 1);
          append_json_string(out_, items[i].first, options_.ensure_ascii);
          out_ += key_separator_;
          write(*items[i].second, depth + 1);
        }
        newline(depth);
        out_ += '}';
        return;
      }
      case Value::Kind::kUndefined:
      case Value::Kind::kNamespace:
      case Value::Kind::kCallable:
        break;
    }
    throw EvalError(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int depth) {
    if (!options_.indent) return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += *options_.indent;
  }

  const JsonOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  JsonWriter writer(options);
  writer.write(v, 0);
  return writer.take();
}

}  // namespace serve8::jinja
