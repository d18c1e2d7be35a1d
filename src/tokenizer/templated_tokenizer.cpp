#include "tokenizer/templated_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/jinja_chat_template.h"

namespace serve8 {

const ChatTemplate& TemplatedTokenizer::chat_template() const {
  SERVE8_CHECK(chat_template_ != nullptr, "the tokenizer '{}' has no chat template set{}", source(),
               chat_template_source().empty() ? "" : " (its files carry a Jinja template that has not been compiled)");
  return *chat_template_;
}

std::string TemplatedTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt) const {
  return join_segment_text(chat_template().render(messages, add_generation_prompt));
}

std::vector<int32_t> TemplatedTokenizer::encode_chat(const std::vector<ChatMessage>& messages,
                                                     bool add_generation_prompt) const {
  return encode_segments(chat_template().render(messages, add_generation_prompt));
}

const JinjaChatTemplate* TemplatedTokenizer::jinja_chat_template() const {
  return dynamic_cast<const JinjaChatTemplate*>(chat_template_.get());
}

std::vector<int32_t> TemplatedTokenizer::encode_chat_values(const jinja::Value& messages, const jinja::Value& tools,
                                                            bool add_generation_prompt) const {
  const JinjaChatTemplate* jinja_template = jinja_chat_template();
  if (jinja_template == nullptr) return Tokenizer::encode_chat_values(messages, tools, add_generation_prompt);
  return encode_segments(jinja::to_segments(jinja_template->render_values(messages, tools, add_generation_prompt)));
}

void TemplatedTokenizer::set_chat_template(std::unique_ptr<ChatTemplate> chat_template,
                                           const std::vector<int>& end_of_turn_ids) {
  SERVE8_CHECK(chat_template != nullptr, "a tokenizer needs a chat template");
  for (int id : end_of_turn_ids) {
    check_id(id);
    add_eos_id(id);
  }
  chat_template_ = std::move(chat_template);
}

void TemplatedTokenizer::add_eos_id(int id) {
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
}

}  // namespace serve8
