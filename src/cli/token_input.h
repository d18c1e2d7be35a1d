// Token input of the in-process tools (dump-logits, calibrate, eval kld): files of token ids, one
// sequence per line, or a text file tokenized with the model's tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace serve8 {

class Tokenizer;

// One sequence of whitespace-separated ids per non-empty line; throws "<path>:<line>: ..." for
// anything that is not an id.
std::vector<std::vector<int32_t>> read_id_lines(const std::string& path);

// Exactly one of text_file (one document: the whole file through the tokenizer) and ids_file (one
// document per line). `tool` names the command in errors.
std::vector<std::vector<int32_t>> read_documents(const std::string& tool, const std::string& text_file,
                                                 const std::string& ids_file, const Tokenizer* tokenizer,
                                                 bool add_special_tokens);

}  // namespace serve8
