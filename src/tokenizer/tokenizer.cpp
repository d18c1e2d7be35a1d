#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/hf_config.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/jinja_chat_template.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/spm_bpe_tokenizer.h"

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

// The special token a chat format closes an assistant turn with (<|im_end|>, <|eot_id|>,
// <end_of_turn>, </s>): the first id of the template text right after an assistant message's
// content. A model ends its reply with it, so it must stop generation even where the files name
// another EOS (a ChatML model whose eos_token is <|endoftext|>).
std::vector<int> end_of_turn_ids(const TemplatedTokenizer& tok, const ChatTemplate& chat) {
  constexpr std::string_view kReply = "OK";
  std::vector<ChatSegment> segments;
  try {
    segments = chat.render({{"user", "Hi"}, {"assistant", std::string(kReply)}}, false);
  } catch (const Error&) {
    return {};  // a template that wants another conversation shape: its EOS alone ends a reply
  }
  for (std::size_t i = segments.size(); i-- > 1;) {
    const ChatSegment& prev = segments[i - 1];
    if (prev.trusted || !prev.text.ends_with(kReply)) continue;
    if (!segments[i].trusted) return {};
    const auto first = segments[i].text.find_first_not_of(" \t\n");
    if (first == std::string::npos) return {};
    const std::vector<ChatSegment> closing = {ChatSegment{.text = segments[i].text.substr(first), .trusted = true}};
    const std::vector<int32_t> ids = tok.encode_segments(closing);
    if (!ids.empty() && tok.is_special(ids[0])) return {ids[0]};
    return {};
  }
  return {};
}

// Compiles a Jinja chat template with HF's special-token variables and sets it, with the token
// it closes a turn with. `what` names its origin; `required` (the user named it) makes a template
// that does not compile an error, where the files' own only leaves chat off.
void use_chat_template(TemplatedTokenizer& tok, const std::string& source, const std::string& what, bool required) {
  std::vector<std::pair<std::string, std::string>> special_tokens;
  if (!tok.bos_token().empty()) special_tokens.emplace_back("bos_token", tok.bos_token());
  if (!tok.eos_token().empty()) special_tokens.emplace_back("eos_token", tok.eos_token());
  std::unique_ptr<ChatTemplate> chat;
  try {
    chat = std::make_unique<JinjaChatTemplate>(source, special_tokens);
  } catch (const Error& e) {
    SERVE8_CHECK(!required, "{}: the chat template does not compile: {}", what, e.what());
    spdlog::warn("{}: its chat template does not compile, so chat requests are refused: {}", what, e.what());
    return;
  }
  const std::vector<int> end_of_turn = end_of_turn_ids(tok, *chat);
  tok.set_chat_template(std::move(chat), end_of_turn);
  std::string stops;
  for (int id : tok.eos_ids()) {
    if (!stops.empty()) stops += ", ";
    stops += fmt::format("{} {}", id, tok.id_to_piece(id));
  }
  spdlog::info("chat template: the Jinja template of {}; generation stops at {}", what, stops);
}

std::unique_ptr<Tokenizer> load_vocabulary(const std::string& dir_or_file) {
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

}  // namespace

std::vector<int32_t> Tokenizer::encode_chat_values(const jinja::Value&, const jinja::Value&, bool) const {
  fail("this tokenizer's chat format is not a Jinja template, so it takes only role/content messages");
}

bool Tokenizer::is_eos(int id) const {
  const std::vector<int> eos = eos_ids();
  return std::find(eos.begin(), eos.end(), id) != eos.end();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_file, const std::string& chat_template) {
  std::unique_ptr<Tokenizer> tok = load_vocabulary(dir_or_file);
  auto* templated = dynamic_cast<TemplatedTokenizer*>(tok.get());
  if (!chat_template.empty()) {
    // A file's path, else the template itself.
    std::string source = chat_template, what = "--chat-template";
    std::error_code ec;
    if (fs::is_regular_file(chat_template, ec)) {
      std::ifstream f(chat_template, std::ios::binary);
      source.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      what = fmt::format("'{}' (--chat-template)", chat_template);
    }
    if (templated != nullptr) {
      use_chat_template(*templated, source, what, true);
    } else if (auto* spm = dynamic_cast<SentencePieceTokenizer*>(tok.get())) {
      std::vector<std::pair<std::string, std::string>> special_tokens;
      if (spm->bos_id() >= 0) special_tokens.emplace_back("bos_token", spm->id_to_piece(spm->bos_id()));
      if (spm->eos_id() >= 0) special_tokens.emplace_back("eos_token", spm->id_to_piece(spm->eos_id()));
      try {
        spm->set_chat_template(std::make_unique<JinjaChatTemplate>(source, special_tokens));
      } catch (const Error& e) {
        fail("{}: the chat template does not compile: {}", what, e.what());
      }
      spdlog::info("chat template: the Jinja template of {}", what);
    } else {
      fail("--chat-template: the tokenizer at '{}' cannot take a chat template", dir_or_file);
    }
  } else if (templated != nullptr) {
    const std::string& source = templated->chat_template_source();
    if (source.empty() && dynamic_cast<SpmBpeTokenizer*>(templated) != nullptr) {
      // As for tokenizer.model files: a SentencePiece vocabulary with no template gets Llama-2's.
      templated->set_chat_template(std::make_unique<Llama2ChatTemplate>());
    } else if (source.empty()) {
      spdlog::info("'{}' carries no chat template: /v1/chat/completions is refused, completions work", dir_or_file);
    } else {
      use_chat_template(*templated, source, fmt::format("'{}'", dir_or_file), false);
    }
  }
  return tok;
}

}  // namespace serve8
