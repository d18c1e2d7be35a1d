// Parses a Jinja template into statements, with jinja2's grammar and operator precedence (filters
// bind tighter than arithmetic, "~" tighter than "+", comparisons chain).
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace serve8::jinja {

// Throws JinjaError naming the template line on a syntax error.
Body parse_template(std::string_view source);

}  // namespace serve8::jinja
