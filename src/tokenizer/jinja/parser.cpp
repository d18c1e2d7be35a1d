#include "tokenizer/jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/expr_parser.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/token_stream.h"

namespace serve8::jinja {
namespace {

// Statements: text, {{ }} and the block tags, each block parsed up to its end tag.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : ts_(std::move(tokens)), expr_(ts_) {}

  Body parse() { return parse_body({}); }

 private:
  // jinja2's message for a tag it did not expect (or the end of the template, tag empty): what
  // the innermost open block waits for, and that block's name.
  [[noreturn]] void fail_unexpected_tag(std::string_view tag) const {
    std::string message =
        tag.empty() ? "Unexpected end of template." : fmt::format("Encountered unknown tag '{}'.", tag);
    if (!end_stack_.empty()) {
      std::string looking;
      for (std::string_view end : end_stack_.back()) {
        if (!looking.empty()) looking += " or ";
        looking += fmt::format("'{}'", end);
      }
      bool expected_elsewhere = false;
      for (const auto& ends : end_stack_) {
        expected_elsewhere = expected_elsewhere || std::find(ends.begin(), ends.end(), tag) != ends.end();
      }
      if (!tag.empty() && expected_elsewhere) {
        message += fmt::format(
            " You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for {}.",
            looking);
      } else {
        message += fmt::format(" Jinja was looking for the following tags: {}.", looking);
      }
    }
    if (!tag_stack_.empty()) {
      message += fmt::format(" The innermost block that needs to be closed is '{}'.", tag_stack_.back());
    }
    ts_.fail(message);
  }

  // Statements up to (not including) a block tag named in end_tags.
  Body parse_body(std::initializer_list<std::string_view> end_tags) {
    if (end_tags.size() > 0) end_stack_.emplace_back(end_tags);
    Body body = parse_body_until_end(end_tags);
    if (end_tags.size() > 0) end_stack_.pop_back();
    return body;
  }

  Body parse_body_until_end(std::initializer_list<std::string_view> end_tags) {
    Body body;
    while (true) {
      const Token& t = ts_.cur();
      if (t.type == TokenType::kEnd) {
        if (end_tags.size() == 0) return body;
        fail_unexpected_tag("");
      }
      if (t.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        ts_.advance();
      } else if (t.type == TokenType::kVariableBegin) {
        ts_.advance();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = ts_.cur().line;
        s->expr = expr_.parse_tuple(true);
        ts_.expect(TokenType::kVariableEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        ts_.advance();
        if (ts_.cur().type == TokenType::kName &&
            std::find(end_tags.begin(), end_tags.end(), ts_.cur().value) != end_tags.end()) {
          return body;
        }
        body.push_back(parse_statement());
      } else {
        ts_.fail(fmt::format("unexpected '{}'", TokenStream::describe(t)));
      }
    }
  }

  // After "{% tag": consumes the tag name and whatever the statement needs up to "%}".
  StmtPtr parse_statement() {
    auto s = std::make_unique<Stmt>();
    s->line = ts_.cur().line;
    if (ts_.cur().type != TokenType::kName) ts_.fail("tag name expected");
    const std::string tag = ts_.cur().value;
    ts_.advance();
    tag_stack_.push_back(tag);
    if (tag_stack_.size() > kMaxNesting) ts_.fail("blocks nested too deeply");
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      ExprPtr condition = expr_.parse_tuple(true);
      ts_.expect_block_end();
      while (true) {
        Body branch = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(condition), std::move(branch));
        const std::string next = ts_.expect_name();
        if (next == "elif") {
          condition = expr_.parse_tuple(true);
          ts_.expect_block_end();
          continue;
        }
        if (next == "else") {
          ts_.expect_block_end();
          s->else_body = parse_body({"endif"});
          ts_.advance();
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      parse_targets(*s);
      if (!ts_.is_name("in")) ts_.fail(fmt::format("expected token 'in', got '{}'", TokenStream::describe(ts_.cur())));
      ts_.advance();
      s->expr = expr_.parse_tuple(false);
      if (ts_.is_name("if")) {
        ts_.advance();
        s->condition = expr_.parse_expression(true);
      }
      if (ts_.is_name("recursive")) ts_.fail("recursive loops are not supported");
      ts_.expect_block_end();
      s->body = parse_body({"endfor", "else"});
      if (ts_.expect_name() == "else") {
        ts_.expect_block_end();
        s->else_body = parse_body({"endfor"});
        ts_.advance();
      }
    } else if (tag == "set") {
      if (ts_.cur().type == TokenType::kName && ts_.peek().type == TokenType::kOp && ts_.peek().value == ".") {
        s->kind = StmtKind::kSet;
        s->target_object = make_expr(ExprKind::kName, ts_.cur().line);
        s->target_object->name = ts_.expect_name();
        ts_.advance();
        s->name = ts_.expect_name();
      } else {
        parse_targets(*s);
      }
      if (ts_.is_op("=")) {
        ts_.advance();
        s->kind = StmtKind::kSet;
        s->expr = expr_.parse_tuple(true);
      } else {
        if (s->target_object || s->targets.size() != 1) ts_.fail("expected token '='");
        s->kind = StmtKind::kSetBlock;
        ts_.expect_block_end();
        s->body = parse_body({"endset"});
        ts_.advance();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = ts_.expect_name();
      ts_.expect_op("(");
      while (!ts_.is_op(")")) {
        std::string param = ts_.expect_name();
        ExprPtr default_value;
        if (ts_.is_op("=")) {
          ts_.advance();
          default_value = expr_.parse_expression(true);
        }
        s->params.emplace_back(std::move(param), std::move(default_value));
        if (!ts_.is_op(",")) break;
        ts_.advance();
      }
      ts_.expect_op(")");
      ts_.expect_block_end();
      s->body = parse_body({"endmacro"});
      ts_.advance();
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = expr_.parse_filter(nullptr);
      while (ts_.is_op("|")) s->expr = expr_.parse_filter(std::move(s->expr));
      ts_.expect_block_end();
      s->body = parse_body({"endfilter"});
      ts_.advance();
    } else if (tag == "generation") {
      s->kind = StmtKind::kScope;
      ts_.expect_block_end();
      s->body = parse_body({"endgeneration"});
      ts_.advance();
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else {
      ts_.back();
      tag_stack_.pop_back();
      fail_unexpected_tag(tag);
    }
    ts_.expect_block_end();
    tag_stack_.pop_back();
    return s;
  }

  // "x", "k, v" or "(k, v)": the names a for loop or set assigns.
  void parse_targets(Stmt& s) {
    const bool parens = ts_.is_op("(");
    if (parens) ts_.advance();
    s.targets.push_back(ts_.expect_name());
    while (ts_.is_op(",")) {
      ts_.advance();
      if (ts_.cur().type != TokenType::kName) break;
      s.targets.push_back(ts_.expect_name());
    }
    if (parens) ts_.expect_op(")");
  }

  static constexpr std::size_t kMaxNesting = 100;  // far beyond real templates; keeps the stack bounded
  TokenStream ts_;
  ExprParser expr_;
  std::vector<std::vector<std::string_view>> end_stack_;  // the end tags each open block waits for
  std::vector<std::string> tag_stack_;                    // the statements being parsed
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace serve8::jinja
