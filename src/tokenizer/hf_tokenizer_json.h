// Loading HF tokenizer.json files of byte-level BPE tokenizers, with the tokenizer_config.json,
// chat_template.jinja and generation_config.json HF keeps beside them.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/bpe_tokenizer.h"

namespace serve8 {

// Loads `path`. Anything the file uses that serve8 does not implement (a Unigram model, a
// Metaspace pre-tokenizer, an NFKC normalizer...) throws Error naming the file, the field and what
// is supported, rather than tokenizing differently from HF.
std::unique_ptr<BpeTokenizer> load_hf_bpe_tokenizer(const std::string& path);
// The same for a file already parsed (`path` names it in messages and locates the configs).
std::unique_ptr<BpeTokenizer> load_hf_bpe_tokenizer(const nlohmann::json& file, const std::string& path);

// Whether `file` is a byte-level tokenizer (its decoder is ByteLevel). A SentencePiece-style
// tokenizer.json (Llama-2, Mistral: Metaspace) is not, and its directory's tokenizer.model serves.
bool is_byte_level_tokenizer_json(const nlohmann::json& file);

}  // namespace serve8
