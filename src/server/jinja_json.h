// Request JSON to the values a Jinja chat template reads (messages, tools), as HF hands a template
// the Python objects json.loads made: dicts keep the request's key order, numbers stay int or
// float, and every string (keys too) is request text, never special tokens.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/jinja/value.h"

namespace serve8 {

jinja::Value to_jinja_value(const nlohmann::ordered_json& j);

}  // namespace serve8
