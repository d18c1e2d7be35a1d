// Byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2, SmolLM2), matching HF tokenizers: added
// tokens, normalizer, pre-tokenizer, BPE model, post-processor and byte-level decoder. Built from
// a tokenizer.json (hf_tokenizer_json.h) or from a GGUF vocabulary (gguf_tokenizer.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/templated_tokenizer.h"

namespace serve8 {

enum class Normalization { kNone, kNfc };

// What a tokenizer file describes; the loaders fill it, BpeTokenizer runs it.
struct BpeTokenizerSpec {
  std::string source;  // the file, for messages
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;
  Normalization normalization = Normalization::kNone;
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // null: the whole text is one word
  // The post-processor's template: ids around the text when add_special_tokens is set. Without one,
  // add_bos_token/add_eos_token decide.
  std::optional<std::pair<std::vector<int32_t>, std::vector<int32_t>>> special_template;
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::string bos_token;  // "" when the tokenizer has none
  std::string eos_token;
  // GGUF names the ids rather than the spellings; when set (>= 0) they are taken as they are.
  int bos_id = -1;
  int eos_id = -1;
  std::vector<int> extra_eos_ids;  // generation_config.json's, or GGUF's end-of-turn ids
  std::string chat_template;       // Jinja source, "" when none came with the files
};

class BpeTokenizer final : public TemplatedTokenizer {
 public:
  // A bos/eos token the vocabulary lacks is logged and left at -1; a spec without a model throws.
  explicit BpeTokenizer(BpeTokenizerSpec spec);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const override;
  std::string token_bytes(int id) const override;
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_id_; }
  std::string id_to_piece(int id) const override;

  // Added tokens are the special tokens of encode_segments.
  std::vector<int32_t> encode_segments(const std::vector<ChatSegment>& segments) const override;
  bool is_special(int id) const override;
  const std::string& bos_token() const override { return spec_.bos_token; }
  const std::string& eos_token() const override { return spec_.eos_token; }
  const std::string& chat_template_source() const override { return spec_.chat_template; }
  int eos_id() const { return eos_id_; }

 private:
  using Accept = AddedTokenMatcher::Accept;
  // Appends the ids of `text` (no post-processing), counting the added tokens `accept` allows.
  void encode_text(std::string_view text, const Accept& accept, std::vector<int32_t>& ids) const;
  void encode_words(std::string_view text, std::vector<int32_t>& ids) const;
  void check_id(int id) const override;
  const std::string& source() const override { return spec_.source; }

  BpeTokenizerSpec spec_;
  AddedTokenMatcher raw_matcher_;         // added tokens matched in the raw text
  AddedTokenMatcher normalized_matcher_;  // those matched after normalization
  std::vector<int32_t> added_by_id_;      // id -> index into spec_.added_tokens, or -1
  int vocab_size_ = 0;
  int bos_id_ = -1;
  int eos_id_ = -1;
};

}  // namespace serve8
