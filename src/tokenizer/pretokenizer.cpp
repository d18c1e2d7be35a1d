#include "tokenizer/pretokenizer.h"

#include <utility>

#include "tokenizer/byte_level.h"

namespace serve8 {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

struct Span {
  std::size_t begin;
  std::size_t end;
  bool is_match;
};

using Matches = std::vector<std::pair<std::size_t, std::size_t>>;

Matches find_literal(std::string_view text, std::string_view literal) {
  Matches matches;
  if (literal.empty()) return matches;
  for (std::size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos)) {
    matches.emplace_back(pos, pos + literal.size());
    pos += literal.size();
  }
  return matches;
}

// The text cut into alternating match and gap spans that cover it exactly.
std::vector<Span> to_spans(std::size_t size, const Matches& matches, bool invert) {
  std::vector<Span> spans;
  std::size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > pos) spans.push_back({pos, begin, invert});
    spans.push_back({begin, end, !invert});
    pos = end;
  }
  if (pos < size) spans.push_back({pos, size, invert});
  return spans;
}

// Applies `behavior` to the spans; what is left are the words, as [begin, end) ranges.
std::vector<std::pair<std::size_t, std::size_t>> apply_behavior(const std::vector<Span>& spans,
                                                                SplitBehavior behavior) {
  std::vector<std::pair<std::size_t, std::size_t>> words;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) words.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) words.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      // A match joins the word before it, unless that word ended in a match itself.
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !words.empty()) {
          words.back().second = s.end;
        } else {
          words.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // The mirror image: walk from the right, a match joins the word after it.
      bool next_match = false;
      std::vector<std::pair<std::size_t, std::size_t>> reversed;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !next_match && !reversed.empty()) {
          reversed.back().first = it->begin;
        } else {
          reversed.emplace_back(it->begin, it->end);
        }
        next_match = it->is_match;
      }
      words.assign(reversed.rbegin(), reversed.rend());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && previous_match && !words.empty()) {
          words.back().second = s.end;
        } else {
          words.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
  }
  return words;
}

}  // namespace

SplitPreTokenizer::SplitPreTokenizer(std::unique_ptr<UnicodeRegex> regex, std::string literal, SplitBehavior behavior,
                                     bool invert)
    : regex_(std::move(regex)), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}

std::unique_ptr<SplitPreTokenizer> SplitPreTokenizer::regex(const std::string& pattern, SplitBehavior behavior,
                                                            bool invert) {
  return std::unique_ptr<SplitPreTokenizer>(
      new SplitPreTokenizer(std::make_unique<UnicodeRegex>(pattern), "", behavior, invert));
}

std::unique_ptr<SplitPreTokenizer> SplitPreTokenizer::literal(std::string text, SplitBehavior behavior, bool invert) {
  return std::unique_ptr<SplitPreTokenizer>(new SplitPreTokenizer(nullptr, std::move(text), behavior, invert));
}

void SplitPreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  const Matches matches = regex_ ? regex_->find_all(text) : find_literal(text, literal_);
  for (const auto& [begin, end] : apply_behavior(to_spans(text.size(), matches, invert_), behavior_)) {
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
  }
}

std::unique_ptr<PreTokenizer> make_digits_pre_tokenizer(bool individual_digits) {
  return individual_digits ? SplitPreTokenizer::regex(R"(\p{N})", SplitBehavior::kIsolated, false)
                           : SplitPreTokenizer::regex(R"(\p{N}+)", SplitBehavior::kIsolated, false);
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space),
      regex_(use_regex ? std::make_unique<UnicodeRegex>(kGpt2SplitPattern) : nullptr) {}

void ByteLevelPreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;  // no word, so no prefix space either
  std::string prefixed;
  if (add_prefix_space_ && !text.starts_with(' ')) {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed += text;
    text = prefixed;
  }
  if (!regex_) {
    if (!text.empty()) out.push_back(byte_level_encode(text));
    return;
  }
  // The GPT-2 pattern matches every character, so its matches are the words.
  std::size_t pos = 0;
  for (const auto& [begin, end] : regex_->find_all(text)) {
    if (begin > pos) out.push_back(byte_level_encode(text.substr(pos, begin - pos)));
    out.push_back(byte_level_encode(text.substr(begin, end - begin)));
    pos = end;
  }
  if (pos < text.size()) out.push_back(byte_level_encode(text.substr(pos)));
}

SequencePreTokenizer::SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
    : steps_(std::move(steps)) {}

void SequencePreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;
  std::vector<std::string> words{std::string(text)};
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    for (const std::string& word : words) step->split(word, next);
    words.swap(next);
  }
  for (std::string& word : words) out.push_back(std::move(word));
}

}  // namespace serve8
