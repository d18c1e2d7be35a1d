#include "tokenizer/spm_bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "tokenizer/prompt_parts.h"
#include "core/utf8.h"

namespace serve8 {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // "▁"

std::size_t char_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// The value of a hex digit (either case), or -1.
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void check_utf8(std::string_view text) {
  const std::size_t bad = first_invalid_utf8(text);
  SERVE8_CHECK(bad == text.size(), "the text is not valid UTF-8 (ill-formed or truncated sequence at byte {})", bad);
}

// A span of the text being merged; merged-away symbols have len 0.
struct Symbol {
  std::size_t begin;
  std::size_t len;
  int32_t prev;
  int32_t next;
};

struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  std::size_t len;  // of the joined piece, to tell a stale candidate
  // The highest score first, the leftmost on ties (SentencePiece's order).
  bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
};

}  // namespace

SpmBpeTokenizer::SpmBpeTokenizer(SpmVocabSpec spec) : spec_(std::move(spec)) {
  const std::size_t n = spec_.pieces.size();
  SERVE8_CHECK(n > 0, "{}: the vocabulary is empty", spec_.source);
  SERVE8_CHECK(spec_.scores.size() == n, "{}: {} pieces but {} scores", spec_.source, n, spec_.scores.size());
  if (spec_.types.empty()) spec_.types.assign(n, GgufTokenType::kNormal);
  SERVE8_CHECK(spec_.types.size() == n, "{}: {} pieces but {} token types", spec_.source, n, spec_.types.size());
  for (const auto& [name, id] :
       {std::pair{"bos", spec_.bos_id}, std::pair{"eos", spec_.eos_id}, std::pair{"unknown", spec_.unk_id}}) {
    SERVE8_CHECK(id >= -1 && id < static_cast<int>(n), "{}: the {} id {} is outside the vocabulary (size {})",
                 spec_.source, name, id, n);
  }

  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  byte_values_.assign(n, -1);
  std::vector<AddedToken> user_defined;
  std::vector<AddedToken> control;
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& piece = spec_.pieces[id];
    switch (spec_.types[id]) {
      case GgufTokenType::kNormal:
      case GgufTokenType::kUndefined:
        mergeable_.emplace(piece, static_cast<int32_t>(id));
        break;
      case GgufTokenType::kUserDefined:
        mergeable_.emplace(piece, static_cast<int32_t>(id));
        user_defined.push_back({.content = piece, .id = static_cast<int32_t>(id)});
        break;
      case GgufTokenType::kControl:
        control.push_back({.content = piece, .id = static_cast<int32_t>(id), .special = true});
        break;
      case GgufTokenType::kByte: {
        // Exactly two hex digits: sscanf's %2X also took a sign ("<0x-F>" read as 4294967281),
        // which indexed byte_ids_ far out of bounds.
        const int hi = piece.size() == 6 ? hex_digit(piece[3]) : -1, lo = piece.size() == 6 ? hex_digit(piece[4]) : -1;
        if (piece.starts_with("<0x") && piece.ends_with(">") && hi >= 0 && lo >= 0) {
          const int value = hi * 16 + lo;
          byte_ids_[value] = static_cast<int32_t>(id);
          byte_values_[id] = static_cast<int16_t>(value);
        }
        break;
      }
      case GgufTokenType::kUnknown:
      case GgufTokenType::kUnused:
        break;
    }
  }
  user_defined_ = AddedTokenMatcher(std::move(user_defined));
  control_ = AddedTokenMatcher(std::move(control));
  if (spec_.eos_id >= 0) add_eos_id(spec_.eos_id);
  for (int id : spec_.extra_eos_ids) {
    if (id >= 0 && id < vocab_size()) add_eos_id(id);
  }
}

void SpmBpeTokenizer::check_id(int id) const {
  SERVE8_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary (size {})", id, vocab_size());
}

bool SpmBpeTokenizer::is_special(int id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const GgufTokenType type = spec_.types[id];
  return id == spec_.bos_id || id == spec_.eos_id || type == GgufTokenType::kControl || type == GgufTokenType::kUnknown;
}

std::string SpmBpeTokenizer::id_to_piece(int id) const {
  check_id(id);
  return spec_.pieces[id];
}

const std::string& SpmBpeTokenizer::bos_token() const {
  static const std::string kNone;
  return spec_.bos_id >= 0 ? spec_.pieces[spec_.bos_id] : kNone;
}

const std::string& SpmBpeTokenizer::eos_token() const {
  static const std::string kNone;
  return spec_.eos_id >= 0 ? spec_.pieces[spec_.eos_id] : kNone;
}

void SpmBpeTokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t len = std::min(char_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, len, index - 1, index + 1});
    pos += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[l.next];
    const auto it = mergeable_.find(text.substr(l.begin, l.len + r.len));
    if (it != mergeable_.end()) queue.push({spec_.scores[it->second], left, l.next, l.len + r.len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.len == 0 || right.len == 0 || left.next != top.right || left.len + right.len != top.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.left;
    consider(left.prev);
    consider(top.left);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].len);
    if (const auto it = mergeable_.find(piece); it != mergeable_.end()) {
      ids.push_back(it->second);
      continue;
    }
    const bool have_bytes =
        std::all_of(piece.begin(), piece.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; });
    if (have_bytes) {
      for (char c : piece) ids.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    } else if (spec_.unk_id >= 0) {
      ids.push_back(spec_.unk_id);
    }
  }
}

void SpmBpeTokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::string escaped;
  escaped.reserve(text.size() + 3);
  if (spec_.add_space_prefix) escaped += kSpaceSymbol;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpaceSymbol;
    } else {
      escaped += c;
    }
  }
  const auto any = [](const AddedToken&, std::size_t, std::size_t) { return true; };
  for (const TextPiece& piece : user_defined_.split(escaped, any)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
    } else {
      encode_bpe(std::string_view(escaped).substr(piece.begin, piece.end - piece.begin), ids);
    }
  }
}

std::vector<int32_t> SpmBpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  check_utf8(text);
  std::vector<int32_t> ids;
  if (add_special_tokens && spec_.add_bos && spec_.bos_id >= 0) ids.push_back(spec_.bos_id);
  encode_fragment(text, ids);  // control spellings ("<s>") are text here
  if (add_special_tokens && spec_.add_eos && spec_.eos_id >= 0) ids.push_back(spec_.eos_id);
  return ids;
}

std::vector<int32_t> SpmBpeTokenizer::encode_segments(const std::vector<ChatSegment>& segments) const {
  std::vector<int32_t> ids;
  for (const PromptPart& part : to_prompt_parts(segments)) {
    switch (part.kind) {
      case PromptPart::Kind::kBos:
        if (spec_.bos_id >= 0) ids.push_back(spec_.bos_id);
        break;
      case PromptPart::Kind::kEos:
        if (spec_.eos_id >= 0) ids.push_back(spec_.eos_id);
        break;
      case PromptPart::Kind::kText: {
        check_utf8(part.text);
        // Text between control pieces is encoded as separate SentencePiece calls, each with its
        // dummy prefix, as HF's LlamaTokenizer and llama.cpp do.
        const auto trusted = [&](const AddedToken&, std::size_t b, std::size_t e) { return part.trusted(b, e); };
        for (const TextPiece& piece : control_.split(part.text, trusted)) {
          if (piece.id >= 0) {
            ids.push_back(piece.id);
          } else {
            encode_fragment(std::string_view(part.text).substr(piece.begin, piece.end - piece.begin), ids);
          }
        }
        break;
      }
    }
  }
  return ids;
}

namespace {

// A text piece as text: SentencePiece's "▁" is a space.
std::string piece_text(const std::string& piece) {
  std::string text;
  for (std::size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      text += ' ';
      pos += kSpaceSymbol.size();
    } else {
      text += piece[pos++];
    }
  }
  return text;
}

}  // namespace

std::string SpmBpeTokenizer::token_bytes(int id) const {
  check_id(id);
  if (byte_values_[id] >= 0) return std::string(1, static_cast<char>(byte_values_[id]));
  if (is_special(id)) return "";
  return piece_text(spec_.pieces[id]);
}

std::string SpmBpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  for (int32_t id : ids) check_id(id);
  std::string out;
  bool at_start = true;  // no text piece printed yet: the dummy prefix's space is still to drop
  std::string bytes;     // a run of byte pieces, which form characters together
  auto flush_bytes = [&] {
    out += replace_invalid_utf8(bytes, /*per_byte=*/true);
    bytes.clear();
  };
  for (int32_t id : ids) {
    const std::string& piece = spec_.pieces[id];
    if (byte_values_[id] >= 0) {
      bytes += static_cast<char>(byte_values_[id]);
      continue;
    }
    flush_bytes();
    if (is_special(id)) {
      if (!skip_special_tokens) {
        out += piece;
        at_start = false;
      }
      continue;
    }
    std::string text = piece_text(piece);
    // The dummy prefix's space comes off the first piece of the output only.
    if (at_start && out.empty() && spec_.add_space_prefix && text.starts_with(' ')) text.erase(0, 1);
    at_start = false;
    out += text;
  }
  flush_bytes();
  return out;
}

}  // namespace serve8
