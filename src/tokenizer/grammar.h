// Constrained decoding: grammars (JSON schema, regex, EBNF, structural tags) compiled by xgrammar
// against a vocabulary, and per-request matchers that say which tokens may come next as a bitmask.
// xgrammar stays behind this header; nothing above tokenizer/ sees its types.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace serve8 {

class Tokenizer;

// A constraint on the generated text, as the request states it (SGLang's sampling_params keys;
// OpenAI's response_format and tool_choice map onto the first three).
struct GrammarSpec {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kEbnf, kStructuralTag };
  Kind kind = Kind::kNone;
  std::string text;    // the schema, regex, EBNF or structural tag (JSON); empty for kJsonObject
  std::string source;  // the request field it came from ("response_format"), for errors
  bool empty() const { return kind == Kind::kNone; }
};

class Grammar;  // compiled against one vocabulary; immutable, shared by the requests that use it

// Compiles grammars for one tokenizer. Thread-safe; xgrammar caches what it compiled, so n copies
// of one request's schema compile once.
class GrammarCompiler {
 public:
  // vocab_size is the model's logits width (at least the tokenizer's; the extra ids are never
  // allowed). stop_ids end a completed grammar (the model's EOS ids).
  GrammarCompiler(const Tokenizer& tokenizer, int vocab_size, std::vector<int> stop_ids);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Throws Error with xgrammar's account of what is wrong (an invalid schema, regex or EBNF).
  std::shared_ptr<const Grammar> compile(const GrammarSpec& spec) const;
  int vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where one request stands in its grammar: advanced by every token it generates, kept across
// retraction (its tokens stay), freed with the request.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // 32-bit words of a next-token mask: bit t % 32 of word t / 32 set = token t allowed.
  int mask_words() const;
  // Writes the mask of the next token into words (mask_words() of them); false when every token is
  // allowed (the mask need not be applied).
  bool fill_next_mask(std::span<int32_t> words);
  // Advances by the token the sampler drew; false (and no change) when the grammar forbids it.
  bool accept(int32_t token);
  // The grammar is complete and a stop token was accepted: nothing may follow.
  bool terminated() const;

 private:
  friend class GrammarMaskFiller;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Fills the next-token masks of many matchers at once on a pool of threads (xgrammar's batch fill):
// the scheduler's per-step mask work, which one thread would make longer than a step at batch 64.
class GrammarMaskFiller {
 public:
  explicit GrammarMaskFiller(int threads);  // <= 0: one per hardware thread
  ~GrammarMaskFiller();
  GrammarMaskFiller(const GrammarMaskFiller&) = delete;
  GrammarMaskFiller& operator=(const GrammarMaskFiller&) = delete;
  // matchers[i]'s mask into words [i * w, (i + 1) * w), w their (equal) mask_words().
  void fill(std::span<GrammarMatcher* const> matchers, std::span<int32_t> words);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A mask's verdict on one token.
inline bool mask_allows(std::span<const int32_t> words, int32_t token) {
  return (static_cast<uint32_t>(words[static_cast<size_t>(token) / 32]) >> (token % 32)) & 1u;
}

}  // namespace serve8
