#include "server/jinja_json.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

namespace serve8 {

jinja::Value to_jinja_value(const nlohmann::ordered_json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      // Python's int has no bound; past int64 a float keeps the magnitude.
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::integer(static_cast<int64_t>(u));
      return Value::floating(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::untrusted_string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::binary:
      return Value::none();  // never produced by the JSON parser
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(to_jinja_value(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict dict;
      for (auto it = j.begin(); it != j.end(); ++it)
        dict.items.emplace_back(Value::untrusted_string(it.key()), to_jinja_value(it.value()));
      return Value::dict(std::move(dict));
    }
  }
  return Value::none();
}

}  // namespace serve8
