// Rendered chat segments as a tokenizer encodes them: runs of text (consecutive segments joined,
// as HF tokenizes the whole rendered prompt) between the BOS and EOS ids the segments ask for,
// each run knowing which of its bytes came from trusted template text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace serve8 {

struct PromptPart {
  enum class Kind { kBos, kText, kEos };
  Kind kind = Kind::kText;
  std::string text;
  // untrusted_before[i]: how many of text[0, i) came from untrusted segments.
  std::vector<uint32_t> untrusted_before;

  // Whether text[begin, end) lies wholly in trusted segments: where an added token may match.
  bool trusted(std::size_t begin, std::size_t end) const { return untrusted_before[end] == untrusted_before[begin]; }
};

std::vector<PromptPart> to_prompt_parts(const std::vector<ChatSegment>& segments);

}  // namespace serve8
