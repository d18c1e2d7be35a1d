#include "tokenizer/prompt_parts.h"

namespace serve8 {

std::vector<PromptPart> to_prompt_parts(const std::vector<ChatSegment>& segments) {
  std::vector<PromptPart> parts;
  PromptPart run;
  run.untrusted_before.push_back(0);
  auto flush = [&] {
    if (!run.text.empty()) parts.push_back(std::move(run));
    run = PromptPart{};
    run.untrusted_before.push_back(0);
  };
  for (const ChatSegment& segment : segments) {
    if (segment.bos) {
      flush();
      parts.push_back({PromptPart::Kind::kBos, "", {}});
    }
    run.text += segment.text;
    for (std::size_t i = 0; i < segment.text.size(); ++i) {
      run.untrusted_before.push_back(run.untrusted_before.back() + (segment.trusted ? 0u : 1u));
    }
    if (segment.eos) {
      flush();
      parts.push_back({PromptPart::Kind::kEos, "", {}});
    }
  }
  flush();
  return parts;
}

}  // namespace serve8
