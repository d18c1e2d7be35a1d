// Splits a Jinja template into text and the tokens inside {{ }} and {% %}, applying whitespace
// control as HF's environment configures jinja2: "-" strips on its side, trim_blocks drops the
// newline after a block or comment tag, lstrip_blocks drops the indentation before one, "+"
// turns either off, and one trailing newline of the template is dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace serve8::jinja {

enum class TokenType {
  kText,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEnd
};

struct Token {
  TokenType type;
  std::string value;  // text, name, unescaped string, or operator spelling
  int line = 1;
  std::int64_t int_value = 0;
  double float_value = 0.0;
};

// Throws JinjaError on unterminated tags, strings or comments and unbalanced brackets.
std::vector<Token> tokenize(std::string_view source);

}  // namespace serve8::jinja
