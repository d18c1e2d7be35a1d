// A Jinja template parsed once and rendered many times, as HF renders chat templates: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, plus the globals HF adds
// (raise_exception, strftime_now, namespace, dict) and its tojson (json.dumps, ensure_ascii off).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/value.h"

namespace serve8::jinja {

class JinjaTemplate {
 public:
  // Throws JinjaError naming the line of a syntax error or of an unknown filter or test.
  explicit JinjaTemplate(std::string_view source);

  // Thread-safe: every render has its own variables. Throws JinjaError (with the line) when the
  // template fails on this context: a raise_exception, an undefined value used, a type error.
  TaintedString render(const Dict& context) const;
  std::string render_to_string(const Dict& context) const { return render(context).text(); }

 private:
  Body body_;
  Dict globals_;
};

}  // namespace serve8::jinja
