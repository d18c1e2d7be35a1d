#include "tokenizer/chat_template.h"

#include <string_view>

#include "core/error.h"

namespace serve8 {
namespace {

// Python's str.strip() for the ASCII whitespace that matters in prompts.
std::string_view strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(kSpace);
  return s.substr(first, last - first + 1);
}

std::string user_turn(std::string_view content) {
  std::string text = "[INST] ";
  text += strip(content);
  text += " [/INST]";
  return text;
}

}  // namespace

std::vector<ChatSegment> Llama2ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt) const {
  SERVE8_CHECK(!messages.empty(), "a chat needs at least one message");
  std::size_t begin = 0;
  std::string first_user;
  if (messages[0].role == "system") {
    SERVE8_CHECK(messages.size() > 1, "the Llama-2 chat format needs a user message after the system message");
    first_user = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
    begin = 1;
  }
  for (std::size_t i = begin; i < messages.size(); ++i) {
    const bool want_user = (i - begin) % 2 == 0;
    const std::string& role = messages[i].role;
    SERVE8_CHECK(role == (want_user ? "user" : "assistant"),
                 "message {} has role '{}' but the Llama-2 chat format needs '{}' there (an optional "
                 "system message first, then user and assistant alternating, starting with user)",
                 i, role, want_user ? "user" : "assistant");
  }
  const bool ends_with_assistant = (messages.size() - begin) % 2 == 0;
  SERVE8_CHECK(!(add_generation_prompt && ends_with_assistant),
               "the Llama-2 chat format has no generation prompt after an assistant message; end the "
               "conversation with a user message");

  std::vector<ChatSegment> segments;
  for (std::size_t i = begin; i < messages.size(); i += 2) {
    const std::string content = i == begin ? first_user + messages[i].content : messages[i].content;
    ChatSegment segment{.text = user_turn(content), .bos = true, .eos = false};
    if (i + 1 < messages.size()) {
      // The trailing space before EOS is what Meta's reference encodes; the model was tuned on it.
      segment.text += ' ';
      segment.text += strip(messages[i + 1].content);
      segment.text += ' ';
      segment.eos = true;
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

std::string join_segment_text(const std::vector<ChatSegment>& segments) {
  std::string text;
  for (const ChatSegment& s : segments) text += s.text;
  return text;
}

}  // namespace serve8
