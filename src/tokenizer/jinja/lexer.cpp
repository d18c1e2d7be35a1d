#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/string.h"

namespace serve8::jinja {

JinjaError::JinjaError(int line, std::string reason)
    : Error(fmt::format("chat template line {}: {}", line, reason)), line_(line), reason_(std::move(reason)) {}

namespace {

// jinja2 reads \r\n and \r as \n, and drops one newline at the very end (keep_trailing_newline off).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.isspace() over the code points at s[pos...], returning the byte length matched.
std::size_t whitespace_length(std::string_view s, std::size_t pos) {
  std::size_t end = pos;
  while (end < s.size()) {
    std::size_t next = end;
    if (!is_py_space(decode_code_point(s, next))) break;
    end = next;
  }
  return end - pos;
}

// Python's "unicode-escape" decoding, which jinja2 applies to string literals.
std::string unescape(std::string_view raw, int line) {
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      out += raw[i];
      continue;
    }
    const char c = raw[++i];
    const auto hex = [&](int digits) {
      const std::string_view h = raw.substr(i + 1, digits);
      if (static_cast<int>(h.size()) != digits ||
          !std::all_of(h.begin(), h.end(), [](char x) { return std::isxdigit(static_cast<unsigned char>(x)); })) {
        throw JinjaError(line, fmt::format("truncated \\{} escape", c));
      }
      i += digits;
      append_utf8(out, static_cast<char32_t>(std::strtoul(std::string(h).c_str(), nullptr, 16)));
    };
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (c >= '0' && c <= '7') {
          unsigned value = 0;
          int n = 0;
          for (; n < 3 && i < raw.size() && raw[i] >= '0' && raw[i] <= '7'; ++n, ++i)
            value = value * 8 + (raw[i] - '0');
          --i;
          append_utf8(out, value);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const std::size_t open = find_opener(pos_);
      if (open == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      lex_tag(open);
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  std::size_t find_opener(std::size_t from) const {
    for (std::size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void emit_text(std::string_view text) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, std::string(text), line_});
    line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  }

  // Text before a tag, with the tag's "-" (strip all whitespace) or lstrip_blocks (strip the
  // indentation of a tag alone at the start of its line) applied.
  void emit_text_before_tag(std::string_view text, char sign, bool lstrip) {
    const int newlines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    std::string_view kept = text;
    if (sign == '-') {
      kept = text.substr(0, strip_range(text, {}, false, true).end);
    } else if (sign != '+' && lstrip) {
      const std::size_t line_begin = text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1;
      const std::string_view tail = text.substr(line_begin);
      if ((line_begin > 0 || line_starting_) && !tail.empty() && whitespace_length(tail, 0) == tail.size()) {
        kept = text.substr(0, line_begin);
      }
    }
    if (!kept.empty()) tokens_.push_back({TokenType::kText, std::string(kept), line_});
    line_ += newlines;
  }

  // After "%}" / "#}": "-" eats all whitespace, trim_blocks one newline, "+" nothing.
  std::size_t after_block_end(std::size_t end, char sign) {
    std::size_t p = end;
    if (sign == '-') {
      p += whitespace_length(src_, p);
    } else if (sign != '+' && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(end), src_.begin() + p, '\n'));
    return p;
  }

  void lex_tag(std::size_t open) {
    const char kind = src_[open + 1];
    const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
    const std::string_view text = std::string_view(src_).substr(pos_, open - pos_);
    if (kind == '%' && lex_raw(open, sign, text)) return;
    emit_text_before_tag(text, sign, kind != '{');
    std::size_t p = open + 2 + (sign != 0 ? 1 : 0);
    if (kind == '#') {
      const std::size_t close = src_.find("#}", p);
      if (close == std::string::npos) throw JinjaError(line_, "Missing end of comment tag");
      const char end_sign = close > p && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(p), src_.begin() + close, '\n'));
      pos_ = after_block_end(close + 2, end_sign);
      return;
    }
    const bool block = kind == '%';
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", line_});
    std::vector<char> brackets;
    while (true) {
      const std::size_t ws = whitespace_length(src_, p);
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(p), src_.begin() + p + ws, '\n'));
      p += ws;
      if (p >= src_.size()) {
        throw JinjaError(line_, fmt::format("unexpected end of template, expected '{}'.",
                                            block ? "end of statement block" : "end of print statement"));
      }
      if (brackets.empty()) {
        const std::string_view rest = std::string_view(src_).substr(p);
        const std::string_view close = block ? "%}" : "}}";
        const bool minus = rest.size() > 2 && rest[0] == '-' && rest.substr(1, 2) == close;
        const bool plus = block && rest.size() > 2 && rest[0] == '+' && rest.substr(1, 2) == close;
        if (minus || plus || rest.substr(0, 2) == close) {
          tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", line_});
          const std::size_t end = p + 2 + (minus || plus ? 1 : 0);
          if (block) {
            pos_ = after_block_end(end, minus ? '-' : (plus ? '+' : 0));
          } else {
            pos_ = minus ? end + whitespace_length(src_, end) : end;
            line_ += static_cast<int>(
                std::count(src_.begin() + static_cast<std::ptrdiff_t>(end), src_.begin() + pos_, '\n'));
            line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
          }
          return;
        }
      }
      p = lex_expression_token(p, brackets);
    }
  }

  // {% raw %}...{% endraw %}: the body is text, whitespace control applying at both tags.
  bool lex_raw(std::size_t open, char sign, std::string_view text) {
    std::size_t p = open + 2 + (sign != 0 ? 1 : 0);
    p += whitespace_length(src_, p);
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    p += 3;
    p += whitespace_length(src_, p);
    std::size_t body;
    if (src_.compare(p, 3, "-%}") == 0) {
      body = p + 3 + whitespace_length(src_, p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      body = p + 2;
    } else {
      return false;
    }
    emit_text_before_tag(text, sign, true);
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(open), src_.begin() + body, '\n'));
    line_starting_ = src_[body - 1] == '\n';
    for (std::size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
      const char end_sign = q + 2 < src_.size() && (src_[q + 2] == '-' || src_[q + 2] == '+') ? src_[q + 2] : 0;
      std::size_t r = q + 2 + (end_sign != 0 ? 1 : 0);
      r += whitespace_length(src_, r);
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      r += whitespace_length(src_, r);
      char close_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      emit_text_before_tag(std::string_view(src_).substr(body, q - body), end_sign, true);
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(q), src_.begin() + r, '\n'));
      pos_ = after_block_end(r + 2, close_sign);
      return true;
    }
    throw JinjaError(line_, "Missing end of raw directive");
  }

  std::size_t lex_expression_token(std::size_t p, std::vector<char>& brackets) {
    const char c = src_[p];
    if (c == '\'' || c == '"') {
      std::size_t q = p + 1;
      while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
      if (q >= src_.size()) throw JinjaError(line_, "unexpected end of string");
      const std::string_view raw = std::string_view(src_).substr(p + 1, q - p - 1);
      tokens_.push_back({TokenType::kString, unescape(raw, line_), line_});
      line_ += static_cast<int>(std::count(raw.begin(), raw.end(), '\n'));
      return q + 1;
    }
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      std::size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      tokens_.push_back({TokenType::kName, src_.substr(p, q - p), line_});
      return q;
    }
    static constexpr std::string_view kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoCharOps) {
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back({TokenType::kOp, std::string(op), line_});
        return p + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      throw JinjaError(line_, fmt::format("unexpected char '{}'", c));
    }
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) throw JinjaError(line_, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c)
        throw JinjaError(line_, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      brackets.pop_back();
    }
    tokens_.push_back({TokenType::kOp, std::string(1, c), line_});
    return p + 1;
  }

  // Python-style int and float literals (underscores allowed between digits, 0x/0o/0b prefixes).
  std::size_t lex_number(std::size_t p) {
    const auto digits = [&](std::size_t q, auto accept) {
      while (q < src_.size() && (accept(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && accept(src_[q + 1]))))
        ++q;
      return q;
    };
    const auto dec = [](char x) { return is_digit(x); };
    const char prefix = p + 1 < src_.size() ? static_cast<char>(std::tolower(src_[p + 1])) : 0;
    if (src_[p] == '0' && (prefix == 'x' || prefix == 'o' || prefix == 'b')) {
      const int base = prefix == 'x' ? 16 : (prefix == 'o' ? 8 : 2);
      const auto accept = [base](char x) {
        return base == 16 ? std::isxdigit(static_cast<unsigned char>(x)) != 0 : (x >= '0' && x < '0' + base);
      };
      const std::size_t q = digits(p + 2, accept);
      std::string clean;
      for (std::size_t i = p + 2; i < q; ++i) {
        if (src_[i] != '_') clean += src_[i];
      }
      tokens_.push_back({TokenType::kInt, src_.substr(p, q - p), line_, std::strtoll(clean.c_str(), nullptr, base)});
      return q;
    }
    std::size_t q = digits(p, dec);
    bool is_float = false;
    // After a dot ("pairs.0.1") numbers are indexes, never floats, as in jinja2.
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = digits(q + 1, dec);
      is_float = true;
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      std::size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        q = digits(e, dec);
        is_float = true;
      }
    }
    std::string clean;
    for (std::size_t i = p; i < q; ++i) {
      if (src_[i] != '_') clean += src_[i];
    }
    Token token{is_float ? TokenType::kFloat : TokenType::kInt, clean, line_};
    if (is_float) {
      token.float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      token.int_value = std::strtoll(clean.c_str(), nullptr, 10);
    }
    tokens_.push_back(std::move(token));
    return q;
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace serve8::jinja
