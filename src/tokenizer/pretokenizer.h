// Pre-tokenizers: how text is cut into the words BPE merges within, as HF tokenizers defines them
// (ByteLevel, Split, Digits, Sequence). The byte-level step also respells each word's bytes in
// GPT-2's alphabet, which is what a byte-level vocabulary is written in.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_regex.h"

namespace serve8 {

// The split patterns of the tokenizers serve8 knows (HF's ByteLevel regex, and the Split regexes
// of Llama-3's and Qwen2's tokenizer.json).
extern const char* const kGpt2SplitPattern;
extern const char* const kLlama3SplitPattern;
extern const char* const kQwen2SplitPattern;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the words `text` splits into to `out`, left to right; never an empty one.
  virtual void split(std::string_view text, std::vector<std::string>& out) const = 0;
};

// What happens to the pattern's matches (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts at the matches of a regex or of a literal string. `invert` swaps matches and the text
// between them before `behavior` applies.
class SplitPreTokenizer final : public PreTokenizer {
 public:
  static std::unique_ptr<SplitPreTokenizer> regex(const std::string& pattern, SplitBehavior behavior, bool invert);
  static std::unique_ptr<SplitPreTokenizer> literal(std::string text, SplitBehavior behavior, bool invert);
  void split(std::string_view text, std::vector<std::string>& out) const override;

 private:
  SplitPreTokenizer(std::unique_ptr<UnicodeRegex> regex, std::string literal, SplitBehavior behavior, bool invert);
  std::unique_ptr<UnicodeRegex> regex_;  // null for a literal
  std::string literal_;
  SplitBehavior behavior_;
  bool invert_;
};

// HF's Digits: every number character (Unicode category N) its own word, or runs of them together.
std::unique_ptr<PreTokenizer> make_digits_pre_tokenizer(bool individual_digits);

// HF's ByteLevel: optionally a space in front of a word that lacks one (GPT-2 without it sees
// "Hello" and " Hello" as different words), optionally the GPT-2 split, then the bytes respelled.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void split(std::string_view text, std::vector<std::string>& out) const override;

 private:
  bool add_prefix_space_;
  std::unique_ptr<UnicodeRegex> regex_;  // null without use_regex
};

// Each step splits every word the previous one produced.
class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps);
  void split(std::string_view text, std::vector<std::string>& out) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace serve8
