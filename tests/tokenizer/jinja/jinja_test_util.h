// Reading the Jinja goldens (written by tests/golden/gen_jinja_golden.py with Python's jinja2) and
// turning their JSON into template values.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/jinja/value.h"

namespace serve8::testing {

inline std::string golden_dir() { return std::string(SERVE8_SOURCE_DIR) + "/tests/golden"; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ordered_json: dicts must keep the key order Python had (tojson and iteration follow it).
inline const nlohmann::ordered_json& jinja_golden() {
  static const nlohmann::ordered_json golden =
      nlohmann::ordered_json::parse(read_file(golden_dir() + "/jinja_golden.json"));
  return golden;
}

inline jinja::Value to_value(const nlohmann::ordered_json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : j) items.push_back(to_value(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict d;
      for (const auto& [key, value] : j.items()) d.items.emplace_back(Value::string(key), to_value(value));
      return Value::dict(std::move(d));
    }
    default:
      return Value();
  }
}

inline jinja::Dict to_dict(const nlohmann::ordered_json& j) { return to_value(j).as_dict(); }

// The untrusted bytes of a render, in order, joined.
inline std::string untrusted_text(const jinja::TaintedString& s) {
  std::string out;
  for (const jinja::ByteSpan& span : s.untrusted()) out += s.text().substr(span.begin, span.end - span.begin);
  return out;
}

}  // namespace serve8::testing
