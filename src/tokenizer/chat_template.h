// Chat prompts: turning a list of role/content messages into the text and special ids a model
// was fine-tuned on. Templates render to segments, not to one string, so special tokens stay ids
// and user text can never smuggle in a "<s>" (a later issue adds Jinja templates behind the same
// interface).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace serve8 {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// A span of prompt text, encoded without special tokens, framed by the BOS and EOS ids.
struct ChatSegment {
  std::string text;
  bool bos = false;  // a BOS id goes before the text's ids
  bool eos = false;  // an EOS id goes after them
  // Template text (Jinja literals, bos_token, ...): special-token spellings in it ("<|im_start|>")
  // are special ids. Text from the request (message contents, roles, tools) is never trusted, so a
  // user cannot forge a turn. Consecutive segments without bos/eos are one text to the encoder
  // (BPE merges and pre-tokenizer splits run across their boundaries, as HF tokenizes the whole
  // rendered prompt); only special-token matching looks at `trusted`.
  bool trusted = false;
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  // Throws Error, with a message fit for an HTTP 400, when the messages do not fit the format.
  virtual std::vector<ChatSegment> render(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt) const = 0;
};

// Llama-2-chat, as Meta's reference chat_completion builds it (and HF's template renders it):
//   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
// One segment per exchange: "[INST] {user} [/INST] {assistant} " with BOS and EOS, and a final
// "[INST] {user} [/INST]" with BOS only. Contents are stripped of surrounding whitespace; the
// system message is folded into the first user message. Roles must be an optional system, then
// user and assistant alternating from a user. The format has no separate generation prompt: a
// conversation that ends with a user turn already ends in " [/INST]", so add_generation_prompt
// changes nothing there, and it is an error after a final assistant turn (nothing to prompt).
class Llama2ChatTemplate final : public ChatTemplate {
 public:
  std::vector<ChatSegment> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;
};

// The segments' texts joined, with no special-token markup: "[INST] ... [/INST] ... [INST] ...".
std::string join_segment_text(const std::vector<ChatSegment>& segments);

}  // namespace serve8
