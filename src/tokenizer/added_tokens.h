// Added tokens (HF's added_tokens, GGUF's control and user-defined entries): strings matched whole
// in the text before any pre-tokenizer sees it, longest match first. Whether a match counts is
// the caller's decision, so a user's text can spell "<|im_start|>" without becoming that token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace serve8 {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;      // control token: skipped by decode(skip_special_tokens)
  bool lstrip = false;       // the match takes the whitespace before it
  bool rstrip = false;       // the match takes the whitespace after it
  bool single_word = false;  // matches only between non-word characters
  bool normalized = false;   // matched in the normalized text rather than the raw text
};

// A piece of the text: an added token's id, or text for the model (id -1).
struct TextPiece {
  std::size_t begin = 0;
  std::size_t end = 0;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  // Decides whether the match of `token` over [begin, end) of the text counts.
  using Accept = std::function<bool(const AddedToken& token, std::size_t begin, std::size_t end)>;

  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }

  // The text cut at the accepted matches, covering it in order. Matches are found left to right,
  // the longest at each position; a rejected match is still passed over whole (as HF's matcher
  // skips it), so a shorter token inside it is not looked for.
  std::vector<TextPiece> split(std::string_view text, const Accept& accept) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    int32_t token = -1;                                   // index into tokens_ when a token ends here
  };
  int32_t child(int32_t node, unsigned char byte) const;
  // The longest token at `pos`, as an index into tokens_, or -1.
  int32_t longest_at(std::string_view text, std::size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
};

}  // namespace serve8
