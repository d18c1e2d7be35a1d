// The tojson filter of HF chat templates: Python's json.dumps(x, ensure_ascii=False, indent=...),
// byte for byte (separators, float formatting, escapes), which nlohmann::json does not reproduce.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace serve8::jinja {

struct JsonOptions {
  std::optional<std::string> indent;  // json.dumps' indent as the string it repeats per level
  bool ensure_ascii = false;
  std::optional<std::string> item_separator;  // defaults: ", " without indent, "," with
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// Throws EvalError with Python's TypeError text for values JSON cannot hold (Undefined, ...).
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace serve8::jinja
