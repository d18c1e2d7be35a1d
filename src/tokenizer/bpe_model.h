// The BPE model of HF tokenizers: a vocabulary and ranked merges. A word starts as its characters
// and the adjacent pair with the best (lowest) rank merges first, leftmost on ties, until no pair
// has a merge. Vocabularies from tokenizer.json and from GGUF (tokenizer.ggml.merges) both end here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace serve8 {

// Lets unordered_map<std::string, V> be searched with a string_view, without a copy.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  // A word that is a whole vocabulary entry is that entry, merges or not (Llama-3 sets this).
  bool ignore_merges = false;
  // A character outside the vocabulary becomes its UTF-8 bytes as "<0xNN>" entries.
  bool byte_fallback = false;
  int32_t unk_id = -1;    // what else such a character becomes; -1: it is dropped, as HF drops it
  bool fuse_unk = false;  // consecutive unknown characters give one unk id
};

class BpeModel {
 public:
  // `merges` are pairs of vocabulary entries in rank order. A merge naming an entry that is not in
  // the vocabulary, or whose result is not, throws Error naming `source` and the merge's index.
  BpeModel(TokenIds vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& source);
  // The same from a token list (id = index), as GGUF stores it; a string listed twice is found
  // by its first id, and decodes from both.
  BpeModel(std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& source);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  // The entry of `id`, or null for an id the vocabulary leaves unassigned.
  const std::string* id_to_token(int32_t id) const;
  int32_t num_ids() const { return static_cast<int32_t>(id_to_token_.size()); }  // largest id + 1

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void push_unknown(std::string_view ch, std::vector<int32_t>& symbols) const;
  void add_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source);

  TokenIds vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> assigned_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  int32_t byte_ids_[256];  // "<0xNN>" entries for byte fallback, -1 where absent
};

}  // namespace serve8
