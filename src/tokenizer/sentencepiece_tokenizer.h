// SentencePiece tokenizers (Llama 1/2, Mistral v0.1) through libsentencepiece, matching HF's
// LlamaTokenizer in its legacy mode, which is how Llama-2 checkpoints ship.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace serve8 {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads the model at `model_path`. tokenizer_config.json (add_bos_token, add_eos_token,
  // bos_token, eos_token) and generation_config.json (eos_token_id) in the same directory refine
  // the defaults when present; a malformed one throws Error naming it.
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const override;
  std::string token_bytes(int id) const override;
  int vocab_size() const override;
  int bos_id() const override { return bos_id_; }
  std::vector<int> eos_ids() const override { return eos_ids_; }
  std::string id_to_piece(int id) const override;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;
  bool has_chat_template() const override { return true; }  // Llama-2's unless replaced
  const JinjaChatTemplate* jinja_chat_template() const override;
  std::vector<int32_t> encode_chat_values(const jinja::Value& messages, const jinja::Value& tools,
                                          bool add_generation_prompt) const override;

  int eos_id() const { return eos_id_; }  // the model's own EOS, the one closing chat turns
  bool add_bos_token() const { return add_bos_token_; }
  bool add_eos_token() const { return add_eos_token_; }
  // BOS, EOS, control and unknown ids: what skip_special_tokens drops.
  bool is_special(int id) const;
  // Llama-2's format is the default; a checkpoint with another format swaps it here.
  void set_chat_template(std::unique_ptr<ChatTemplate> chat_template);

 private:
  void read_configs(const std::string& dir);
  void check_id(int id) const;
  std::vector<int32_t> encode_segments(const std::vector<ChatSegment>& segments) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<ChatTemplate> chat_template_;
  int bos_id_ = -1;
  int eos_id_ = -1;
  std::vector<int> eos_ids_;
  bool add_bos_token_ = true;   // LlamaTokenizer's default
  bool add_eos_token_ = false;  // LlamaTokenizer's default
};

}  // namespace serve8
