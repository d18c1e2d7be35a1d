// The tokenizer interface the engine and server see: text to ids and back, the special ids, and
// chat prompts. Implementations are immutable once loaded, so one instance serves every thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace serve8 {

namespace jinja {
class Value;
}  // namespace jinja
class JinjaChatTemplate;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`. Special-token spellings in the text ("<s>") are plain text, never special
  // ids, so a prompt cannot forge them. add_special_tokens adds what the tokenizer's config asks
  // for (Llama: a BOS in front, as HF's LlamaTokenizer with add_bos_token).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;

  // The text of `ids`, as HF decodes them: SentencePiece vocabularies drop one leading space at
  // the very start of the output only, byte-level ones keep every byte. skip_special_tokens drops
  // BOS/EOS/control and unknown ids; otherwise they appear as their piece text ("<s>"). Bytes that
  // are not UTF-8 come out as U+FFFD. Ids outside the vocabulary throw Error.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const = 0;

  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when the vocabulary has none
  // Every id that ends generation (the model's EOS plus any generation_config.json adds).
  virtual std::vector<int> eos_ids() const = 0;
  // The vocabulary entry as stored ("▁Hello", "<0x0A>"); throws Error outside the vocabulary.
  virtual std::string id_to_piece(int id) const = 0;
  // The bytes `id` adds to the text in the middle of an output ("▁Hello" -> " Hello", "<0x0A>" ->
  // "\n", byte-level "ĠHello" -> " Hello"); empty for special, control and unknown ids. Grammars
  // match generated text byte by byte through these.
  virtual std::string token_bytes(int id) const = 0;

  // The chat prompt as text, for logs and display. It carries no BOS/EOS markup, so for a
  // multi-turn chat encode(apply_chat_template(...)) is not the prompt: use encode_chat.
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt) const = 0;
  // The chat prompt as ids, BOS/EOS inserted as ids between turns: what the server feeds the model.
  virtual std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const = 0;
  // Whether the chat calls can work: false for a vocabulary whose files carry no chat template
  // (a base model), which then serves completions only.
  virtual bool has_chat_template() const = 0;
  // The Jinja chat template in use (the files' or --chat-template's); null for the built-in
  // Llama-2 format or none. Tools and tool messages need one (encode_chat_values).
  virtual const JinjaChatTemplate* jinja_chat_template() const { return nullptr; }
  // The chat prompt as ids from messages as HF's apply_chat_template takes them: a list of message
  // dicts with all their fields (tool_calls, tool_call_id, ...) and a list of tool dicts, or None.
  // Every string in them is request text, never special tokens. Throws Error when the template is
  // not Jinja or rejects the conversation.
  virtual std::vector<int32_t> encode_chat_values(const jinja::Value& messages, const jinja::Value& tools,
                                                  bool add_generation_prompt) const;

  bool is_eos(int id) const;
};

// Loads the tokenizer at `dir_or_file`: a model directory (tokenizer.json, else tokenizer.model),
// a tokenizer.json, a .gguf file (its vocabulary) or a SentencePiece model file. Throws Error
// naming the path and what was looked for when nothing fits. The chat template the files carry
// (tokenizer_config.json's chat_template, GGUF's tokenizer.chat_template) is compiled and set, and
// the token it closes an assistant turn with ends generation too; one that does not compile is
// logged and leaves the tokenizer without chat. SentencePiece vocabularies without a template
// (tokenizer.model, GGUF "llama") use the Llama-2 format. `chat_template` (a Jinja file, or the
// template text) replaces the files' template; one that does not compile is an Error.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_file, const std::string& chat_template = "");

}  // namespace serve8
