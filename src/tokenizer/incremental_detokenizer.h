// Streaming detokenization: text for one generated token at a time, so a server can send it as it
// comes. Whole characters only: byte-fallback pieces (<0xF0><0x9F><0x99><0x82> is "🙂") split a
// character across tokens, and a half-sent character would be garbage on the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace serve8 {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. `context` (the tail of the prompt, say) is decoded for
  // its effect on the first pieces' spacing but never emitted: with an empty context the first
  // "▁Paris" prints "Paris", after "... is" it prints " Paris", as an OpenAI-style completion
  // wants. Only the last kMaxContextTokens context ids are kept.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true,
                                  std::span<const int32_t> context = {});

  // Adds one id; returns the text it completes (often empty: a held-back partial character, or a
  // special token skipped). An id decode rejects throws Error and leaves the stream as it was.
  std::string push(int32_t id);
  // Emits whatever is held back (a partial character becomes U+FFFD, as in decode) and ends the
  // stream; push after flush starts from where the text stands.
  std::string flush();

  std::size_t num_tokens_pushed() const { return num_pushed_; }

  static constexpr std::size_t kMaxContextTokens = 8;

 private:
  std::string emit(bool final_chunk);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  // Only the window still needed is kept, so the work per push is bounded by the tokens since the
  // last emitted text. ids_[0, read_offset_) has been emitted (or is context);
  // ids_[prefix_offset_, read_offset_) is decoded again each push so the leading-space rule sees
  // the same first piece in both decodes.
  std::vector<int32_t> ids_;
  std::size_t prefix_offset_ = 0;
  std::size_t read_offset_ = 0;
  std::size_t num_pushed_ = 0;
};

}  // namespace serve8
