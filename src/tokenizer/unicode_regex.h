// Unicode regular expressions for pre-tokenizers, through PCRE2 (UTF-8, Unicode properties for
// \p{L}, \s, \w; JIT-compiled where the platform has it). The patterns come from tokenizer files
// written for Oniguruma (HF tokenizers) and from llama.cpp's table; both dialects agree with PCRE2
// on everything those patterns use.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace serve8 {

class UnicodeRegex {
 public:
  // Throws Error naming `pattern` and PCRE2's message (with the offset) when it does not compile.
  explicit UnicodeRegex(const std::string& pattern);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // The [begin, end) byte ranges of the non-overlapping, non-empty matches in `text`, left to
  // right. `text` must be valid UTF-8 (the tokenizer checks it once, on entry). Safe to call from
  // several threads at once.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace serve8
