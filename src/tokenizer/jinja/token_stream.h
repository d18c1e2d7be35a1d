// A cursor over the lexer's tokens with the checks both parsers (statements, expressions) use.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/lexer.h"

namespace serve8::jinja {

class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(std::size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::kOp && cur().value == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::kName && cur().value == name; }

  [[noreturn]] void fail(const std::string& reason) const { throw JinjaError(cur().line, reason); }

  // How jinja2 names a token in its syntax errors.
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kVariableEnd:
        return "end of print statement";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kEnd:
        return "end of template";
      case TokenType::kInt:
        return "integer";
      case TokenType::kFloat:
        return "float";
      case TokenType::kString:
        return "string";
      default:
        return t.value;
    }
  }

  void expect_op(std::string_view op) {
    if (!is_op(op)) fail(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
    advance();
  }
  void expect(TokenType type, std::string_view what) {
    if (cur().type != type) fail(fmt::format("expected token '{}', got '{}'", what, describe(cur())));
    advance();
  }
  void expect_block_end() { expect(TokenType::kBlockEnd, "end of statement block"); }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail(fmt::format("expected name, got '{}'", describe(cur())));
    std::string name = cur().value;
    advance();
    return name;
  }

  // Steps back one token (to report an error at the token just consumed).
  void back() {
    if (pos_ > 0) --pos_;
  }

 private:
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
};

}  // namespace serve8::jinja
