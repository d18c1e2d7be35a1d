#include "cli/token_input.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

std::vector<std::vector<int32_t>> read_id_lines(const std::string& path) {
  std::ifstream in(path);
  SERVE8_CHECK(in.good(), "cannot read {}", path);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    long v = 0;
    while (ls >> v) ids.push_back(static_cast<int32_t>(v));
    SERVE8_CHECK(ls.eof(), "{}:{}: expected token ids separated by spaces", path, n);
    if (!ids.empty()) out.push_back(std::move(ids));
  }
  return out;
}

std::vector<std::vector<int32_t>> read_documents(const std::string& tool, const std::string& text_file,
                                                 const std::string& ids_file, const Tokenizer* tokenizer,
                                                 bool add_special_tokens) {
  SERVE8_CHECK(text_file.empty() != ids_file.empty(), "{}: give exactly one of --text and --ids-file", tool);
  if (!ids_file.empty()) return read_id_lines(ids_file);
  SERVE8_CHECK(tokenizer != nullptr, "{}: --text needs the model's tokenizer (--tokenizer-path), or use --ids-file",
               tool);
  std::ifstream in(text_file);
  SERVE8_CHECK(in.good(), "{}: cannot read {}", tool, text_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return {tokenizer->encode(ss.str(), add_special_tokens)};
}

}  // namespace serve8
