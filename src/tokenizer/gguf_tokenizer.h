// Tokenizers from GGUF vocabularies: "gpt2" (byte-level BPE with merges, pre-tokenizer named by
// tokenizer.ggml.pre) becomes a BpeTokenizer, "llama" (SentencePiece pieces and scores) a
// SpmBpeTokenizer. Added tokens follow the token types: control ones are special, user-defined
// ones plain added tokens, as HF's GGUF conversion makes them.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

// Throws Error naming vocab.source for a tokenizer model or pre-tokenizer serve8 does not know,
// and for lists that disagree.
std::unique_ptr<Tokenizer> make_gguf_tokenizer(const GgufVocab& vocab);
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path);

// The pre-tokenizer names of llama.cpp (tokenizer.ggml.pre) serve8 maps to HF pre-tokenizers.
bool is_known_gguf_pre_tokenizer(const std::string& pre);

}  // namespace serve8
