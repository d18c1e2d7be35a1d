// The chat side shared by the vocabularies that come with their own Jinja template (HF
// tokenizer.json: BpeTokenizer; GGUF: BpeTokenizer or SpmBpeTokenizer): load_tokenizer compiles
// the template after loading and sets it here, chat messages render into segments that
// encode_segments turns into ids, and the ids that close a turn join the EOS ids.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace serve8 {

class TemplatedTokenizer : public Tokenizer {
 public:
  std::vector<int> eos_ids() const override { return eos_ids_; }
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;
  bool has_chat_template() const override { return chat_template_ != nullptr; }
  const JinjaChatTemplate* jinja_chat_template() const override;
  std::vector<int32_t> encode_chat_values(const jinja::Value& messages, const jinja::Value& tools,
                                          bool add_generation_prompt) const override;

  // The ids of rendered chat segments (what encode_chat does after rendering): consecutive
  // segments are one text, special tokens count only where they lie wholly in trusted segments.
  virtual std::vector<int32_t> encode_segments(const std::vector<ChatSegment>& segments) const = 0;
  virtual bool is_special(int id) const = 0;
  virtual const std::string& bos_token() const = 0;  // "" when the vocabulary has none
  virtual const std::string& eos_token() const = 0;
  // The Jinja source the files carry, "" when none.
  virtual const std::string& chat_template_source() const = 0;
  // Until a template is set the chat calls throw. end_of_turn_ids: the ids the format closes a
  // turn with, which end generation as EOS does (each must be in the vocabulary).
  void set_chat_template(std::unique_ptr<ChatTemplate> chat_template, const std::vector<int>& end_of_turn_ids = {});

 protected:
  // Adds id to the EOS ids unless it is there already.
  void add_eos_id(int id);
  // Throws Error for an id outside the vocabulary.
  virtual void check_id(int id) const = 0;
  // The files the vocabulary came from, for messages.
  virtual const std::string& source() const = 0;

 private:
  const ChatTemplate& chat_template() const;

  std::unique_ptr<ChatTemplate> chat_template_;
  std::vector<int> eos_ids_;
};

}  // namespace serve8
