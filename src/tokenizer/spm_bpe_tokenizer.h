// SentencePiece BPE vocabularies stored in GGUF files (tokenizer.ggml.model = "llama": Llama-1/2,
// Mistral v0.1 converted by llama.cpp): pieces, scores and types, no merges. Encoding follows
// SentencePiece's BPE: spaces become "▁", a "▁" goes in front (add_dummy_prefix), and the adjacent
// pair whose joined piece has the highest score merges first; a character with no piece falls
// back to its bytes as <0xNN> pieces. Matches libsentencepiece on the same vocabulary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/templated_tokenizer.h"

namespace serve8 {

struct SpmVocabSpec {
  std::string source;  // the file, for messages
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<GgufTokenType> types;
  int bos_id = -1;
  int eos_id = -1;
  int unk_id = -1;
  bool add_bos = true;  // what llama.cpp and HF's LlamaTokenizer default to
  bool add_eos = false;
  bool add_space_prefix = true;
  std::vector<int> extra_eos_ids;
  std::string chat_template;
};

class SpmBpeTokenizer final : public TemplatedTokenizer {
 public:
  // Throws Error naming spec.source when the lists disagree in length or an id is out of range.
  explicit SpmBpeTokenizer(SpmVocabSpec spec);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const override;
  std::string token_bytes(int id) const override;
  int vocab_size() const override { return static_cast<int>(spec_.pieces.size()); }
  int bos_id() const override { return spec_.bos_id; }
  std::string id_to_piece(int id) const override;

  // Control pieces ("<s>") are the special tokens of encode_segments.
  std::vector<int32_t> encode_segments(const std::vector<ChatSegment>& segments) const override;
  bool is_special(int id) const override;
  const std::string& bos_token() const override;
  const std::string& eos_token() const override;
  const std::string& chat_template_source() const override { return spec_.chat_template; }

 private:
  // One SentencePiece encode call: escaping, dummy prefix, user-defined pieces, BPE.
  void encode_fragment(std::string_view text, std::vector<int32_t>& ids) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& ids) const;
  void check_id(int id) const override;
  const std::string& source() const override { return spec_.source; }

  SpmVocabSpec spec_;
  TokenIds mergeable_;                // normal and user-defined pieces: what merges may form
  int32_t byte_ids_[256];             // byte -> its <0xNN> piece, or -1
  std::vector<int16_t> byte_values_;  // id -> the byte of a <0xNN> piece, or -1
  AddedTokenMatcher user_defined_;    // matched in every text, as SentencePiece does
  AddedTokenMatcher control_;         // matched only in trusted chat text
};

}  // namespace serve8
