#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace serve8 {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_sentencepiece(const fs::path& p) {
  return std::make_unique<SentencePieceTokenizer>(p.string());
}

// A file a model directory may hold and how to load it, in order of preference. HF tokenizer.json
// and GGUF vocabularies join this list when they are supported.
struct TokenizerFile {
  const char* name;
  std::unique_ptr<Tokenizer> (*load)(const fs::path&);
};

constexpr std::array kTokenizerFiles = {
    TokenizerFile{"tokenizer.model", &load_sentencepiece},
};

// Formats recognised by name but not loadable yet; the error says so instead of failing to parse.
bool is_unsupported_format(const fs::path& p) {
  const std::string ext = p.extension().string();
  return p.filename() == "tokenizer.json" || ext == ".json" || ext == ".gguf";
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

  if (fs::is_directory(status)) {
    std::string looked_for;
    for (const TokenizerFile& file : kTokenizerFiles) {
      const fs::path candidate = path / file.name;
      if (fs::is_regular_file(candidate, ec)) return file.load(candidate);
      looked_for += looked_for.empty() ? file.name : std::string(", ") + file.name;
    }
    const bool has_json = fs::is_regular_file(path / "tokenizer.json", ec);
    fail("no tokenizer found in '{}': looked for {}{}", dir_or_file, looked_for,
         has_json ? " (tokenizer.json is there, but HF tokenizer.json files are not supported yet)" : "");
  }

  SERVE8_CHECK(!is_unsupported_format(path),
               "tokenizer file '{}' is not supported yet: only SentencePiece models (tokenizer.model) load",
               dir_or_file);
  // SentencePiece models carry no fixed extension, so any other file is tried as one.
  return std::make_unique<SentencePieceTokenizer>(dir_or_file);
}

}  // namespace serve8
