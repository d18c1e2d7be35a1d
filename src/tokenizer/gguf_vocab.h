// The tokenizer part of a GGUF file's metadata (llama.cpp's tokenizer.* keys), read with
// formats/gguf_file.h (metadata only, never the tensor data).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace serve8 {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct GgufVocab {
  std::string source;  // the file, for messages
  std::string model;   // tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece)...
  std::string pre;     // tokenizer.ggml.pre: which pre-tokenizer regexes ("smollm", "llama-bpe"...)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // SentencePiece scores; empty for gpt2
  std::vector<int32_t> token_types;  // GgufTokenType values; empty when the file has none
  std::vector<std::string> merges;   // "a b", best first; gpt2 only
  std::optional<int64_t> bos_id, eos_id, unk_id, eot_id, eom_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template
};

// Reads the tokenizer metadata of the GGUF file at `path`. Throws Error naming the file and the
// key for a malformed file or a key of the wrong type; keys a file lacks stay empty.
GgufVocab read_gguf_vocab(const std::string& path);

}  // namespace serve8
