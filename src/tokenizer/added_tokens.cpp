#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode_regex.h"

namespace serve8 {
namespace {

// Start of the UTF-8 character that ends just before `pos`.
std::size_t previous_char_start(std::string_view text, std::size_t pos) {
  std::size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

std::size_t next_char_end(std::string_view text, std::size_t pos) {
  std::size_t end = pos + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  return end;
}

// Unicode White_Space, which is what lstrip/rstrip take (Rust's char::is_whitespace).
bool is_whitespace_char(std::string_view ch) {
  static constexpr std::string_view kWhitespace[] = {
      " ",        "\t",           "\n",           "\v",           "\f",           "\r",           "\xC2\x85",
      "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  if (ch.size() == 3 && ch[0] == '\xE2' && ch[1] == '\x80' && static_cast<unsigned char>(ch[2]) <= 0x8A) {
    return true;  // U+2000..U+200A
  }
  return std::find(std::begin(kWhitespace), std::end(kWhitespace), ch) != std::end(kWhitespace);
}

// A word character as single_word sees it: what Rust's regex calls \w (alphabetic, marks, decimal
// digits, connector punctuation, joiners). "²" is not one, "_" is.
bool is_word_char(std::string_view ch) {
  static const UnicodeRegex kWord(R"(^[\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]$)");
  return !kWord.find_all(ch).empty();
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    int32_t node = 0;
    for (char c : tokens_[i].content) {
      const auto byte = static_cast<unsigned char>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        auto& edges = trie_[node].next;
        edges.insert(std::lower_bound(edges.begin(), edges.end(), std::make_pair(byte, int32_t{0})),
                     std::make_pair(byte, next));
        trie_.emplace_back();
      }
      node = next;
    }
    // An empty content can never match; a repeated one keeps its first entry, as HF does.
    if (node != 0 && trie_[node].token < 0) trie_[node].token = static_cast<int32_t>(i);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  const auto& edges = trie_[node].next;
  const auto it = std::lower_bound(edges.begin(), edges.end(), std::make_pair(byte, int32_t{0}));
  return it != edges.end() && it->first == byte ? it->second : -1;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, std::size_t pos) const {
  int32_t best = -1;
  int32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (trie_[node].token >= 0) best = trie_[node].token;
  }
  return best;
}

std::vector<TextPiece> AddedTokenMatcher::split(std::string_view text, const Accept& accept) const {
  std::vector<TextPiece> pieces;
  std::size_t piece_start = 0;  // where the current run of plain text began
  std::size_t pos = 0;
  while (pos < text.size()) {
    const int32_t index = tokens_.empty() ? -1 : longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    std::size_t begin = pos;
    std::size_t end = pos + token.content.size();
    pos = end;
    if (token.single_word) {
      const std::size_t before = begin > 0 ? previous_char_start(text, begin) : begin;
      const bool word_before = begin > 0 && is_word_char(text.substr(before, begin - before));
      const bool word_after = end < text.size() && is_word_char(text.substr(end, next_char_end(text, end) - end));
      if (word_before || word_after) continue;
    }
    if (!accept(token, begin, end)) continue;
    if (token.lstrip) {
      // Whitespace an earlier match already took stays with it.
      while (begin > piece_start) {
        const std::size_t prev = previous_char_start(text, begin);
        if (!is_whitespace_char(text.substr(prev, begin - prev))) break;
        begin = prev;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        const std::size_t next = next_char_end(text, end);
        if (!is_whitespace_char(text.substr(end, next - end))) break;
        end = next;
      }
      pos = end;
    }
    if (begin > piece_start) pieces.push_back({piece_start, begin, -1});
    pieces.push_back({begin, end, token.id});
    piece_start = end;
  }
  if (piece_start < text.size()) pieces.push_back({piece_start, text.size(), -1});
  return pieces;
}

}  // namespace serve8
