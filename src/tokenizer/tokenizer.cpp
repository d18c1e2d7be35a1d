#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/hf_config.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace serve8 {
namespace {

namespace fs = std::filesystem;

// A model directory: tokenizer.json first (HF's fast tokenizer, what transformers prefers), unless
// it is a SentencePiece-style one (Llama-2's Metaspace) and tokenizer.model is there to serve.
std::unique_ptr<Tokenizer> load_from_directory(const fs::path& dir) {
  std::error_code ec;
  const fs::path json_path = dir / "tokenizer.json";
  const fs::path model_path = dir / "tokenizer.model";
  const bool has_model = fs::is_regular_file(model_path, ec);
  if (fs::is_regular_file(json_path, ec)) {
    const nlohmann::json file = read_json(json_path);
    if (is_byte_level_tokenizer_json(file) || !has_model) return load_hf_bpe_tokenizer(file, json_path.string());
    spdlog::debug("'{}' is not a byte-level BPE tokenizer; using '{}'", json_path.string(), model_path.string());
  }
  if (has_model) return std::make_unique<SentencePieceTokenizer>(model_path.string());
  fail("no tokenizer found in '{}': looked for tokenizer.json and tokenizer.model", dir.string());
}

}  // namespace

bool Tokenizer::is_eos(int id) const {
  const std::vector<int> eos = eos_ids();
  return std::find(eos.begin(), eos.end(), id) != eos.end();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_file) {
  const fs::path path(dir_or_file);
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  SERVE8_CHECK(fs::exists(status), "tokenizer path '{}' does not exist", dir_or_file);
  if (fs::is_directory(status)) return load_from_directory(path);

  const std::string ext = path.extension().string();
  if (ext == ".gguf") return load_gguf_tokenizer(dir_or_file);
  if (ext == ".json") return load_hf_bpe_tokenizer(dir_or_file);
  // SentencePiece models carry no fixed extension, so any other file is tried as one.
  return std::make_unique<SentencePieceTokenizer>(dir_or_file);
}

}  // namespace serve8
