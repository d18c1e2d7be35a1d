// The chat template a model ships (tokenizer_config.json "chat_template", GGUF
// "tokenizer.chat_template"), rendered for /v1/chat/completions exactly as HF's
// apply_chat_template renders it, with the request's text marked untrusted in the segments.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/template.h"

namespace serve8 {

namespace jinja {
// The rendered text cut where trust changes: trusted and untrusted runs alternate, bos = eos = false.
std::vector<ChatSegment> to_segments(const TaintedString& rendered);
}  // namespace jinja

class JinjaChatTemplate final : public ChatTemplate {
 public:
  // special_tokens: HF's special_tokens_map ("bos_token", "eos_token", "unk_token", ...), which HF
  // hands the template as variables; a token the model lacks (Qwen's BOS) is left out, so the
  // template sees it undefined. All are trusted. Throws jinja::JinjaError on a template that does
  // not parse.
  JinjaChatTemplate(std::string_view source, const std::vector<std::pair<std::string, std::string>>& special_tokens);
  JinjaChatTemplate(std::string_view source, const std::string& bos_token, const std::string& eos_token)
      : JinjaChatTemplate(source, {{"bos_token", bos_token}, {"eos_token", eos_token}}) {}

  // Throws jinja::JinjaError (an Error) when the template rejects the conversation; its reason()
  // is the template's own message (raise_exception's text).
  std::vector<ChatSegment> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;

  // The general form: messages (a list of dicts) and tools (a list, or None) as the request gave
  // them, every string in them untrusted (message fields that are None are dropped, as HF does);
  // extra: further trusted template variables.
  jinja::TaintedString render_values(const jinja::Value& messages, const jinja::Value& tools,
                                     bool add_generation_prompt, const jinja::Dict& extra = {}) const;

  // The template's text, as given (the server reads a model's tool-call markup from it).
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::JinjaTemplate template_;
  jinja::Dict special_tokens_;
};

}  // namespace serve8
