#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/jinja_chat_template.h"

namespace serve8 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // "▁", SentencePiece's word boundary

// Parses `path` when it exists; a file that is there but unreadable or malformed is an error, not
// something to skip silently.
std::optional<json> read_json_if_present(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  SERVE8_CHECK(in, "cannot open '{}'", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("cannot parse '{}': {}", path.string(), e.what());
  }
}

// HF writes special tokens either as a string or as an AddedToken object {"content": ...}.
std::optional<std::string> token_text(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()),
      chat_template_(std::make_unique<Llama2ChatTemplate>()) {
  const auto status = sp_->Load(model_path);
  SERVE8_CHECK(status.ok(), "cannot load SentencePiece model '{}': {}", model_path, status.ToString());
  bos_id_ = sp_->bos_id();
  eos_id_ = sp_->eos_id();
  read_configs(fs::path(model_path).parent_path().string());
  if (eos_id_ >= 0 && std::find(eos_ids_.begin(), eos_ids_.end(), eos_id_) == eos_ids_.end()) {
    eos_ids_.insert(eos_ids_.begin(), eos_id_);
  }
  spdlog::debug("loaded SentencePiece tokenizer '{}': {} pieces, bos {}, eos {}", model_path, vocab_size(), bos_id_,
                eos_id_);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::read_configs(const std::string& dir) {
  const fs::path base = dir.empty() ? fs::path(".") : fs::path(dir);
  // A piece named in a config must exist; PieceToId answers unk for unknown text.
  auto piece_id = [&](const std::string& piece) {
    const int id = sp_->PieceToId(piece);
    return id == sp_->unk_id() && piece != sp_->IdToPiece(id) ? -1 : id;
  };

  if (auto config = read_json_if_present(base / "tokenizer_config.json")) {
    if (auto it = config->find("add_bos_token"); it != config->end() && it->is_boolean()) add_bos_token_ = *it;
    if (auto it = config->find("add_eos_token"); it != config->end() && it->is_boolean()) add_eos_token_ = *it;
    if (auto text = token_text(*config, "bos_token")) {
      const int id = piece_id(*text);
      if (id >= 0) {
        bos_id_ = id;
      } else {
        spdlog::warn("tokenizer_config.json names bos_token '{}', which is not in the vocabulary", *text);
      }
    }
    if (auto text = token_text(*config, "eos_token")) {
      const int id = piece_id(*text);
      if (id >= 0) {
        eos_id_ = id;
      } else {
        spdlog::warn("tokenizer_config.json names eos_token '{}', which is not in the vocabulary", *text);
      }
    }
  }

  if (auto config = read_json_if_present(base / "generation_config.json")) {
    // eos_token_id is an int or a list (Llama-3 lists several); all of them stop generation.
    const auto it = config->find("eos_token_id");
    if (it != config->end()) {
      const json ids = it->is_array() ? *it : json::array({*it});
      for (const json& v : ids) {
        if (!v.is_number_integer()) continue;
        const int id = v.get<int>();
        if (id < 0 || id >= vocab_size()) {
          spdlog::warn("generation_config.json eos_token_id {} is outside the vocabulary (size {})", id, vocab_size());
          continue;
        }
        if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
      }
    }
  }
}

int SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

void SentencePieceTokenizer::check_id(int id) const {
  SERVE8_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary (size {})", id, vocab_size());
}

bool SentencePieceTokenizer::is_special(int id) const {
  if (id < 0 || id >= vocab_size()) return false;
  return id == bos_id_ || id == eos_id_ || sp_->IsControl(id) || sp_->IsUnknown(id);
}

std::string SentencePieceTokenizer::id_to_piece(int id) const {
  check_id(id);
  return sp_->IdToPiece(id);
}

std::string SentencePieceTokenizer::token_bytes(int id) const {
  check_id(id);
  if (is_special(id)) return "";
  const std::string piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  std::string text;
  for (std::size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, 3, "\xe2\x96\x81") == 0) {  // "▁", SentencePiece's space
      text += ' ';
      pos += 3;
    } else {
      text += piece[pos++];
    }
  }
  return text;
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int> pieces;
  const auto status = sp_->Encode(text, &pieces);
  SERVE8_CHECK(status.ok(), "SentencePiece cannot encode the text: {}", status.ToString());
  std::vector<int32_t> ids;
  ids.reserve(pieces.size() + 2);
  if (add_special_tokens && add_bos_token_ && bos_id_ >= 0) ids.push_back(bos_id_);
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  if (add_special_tokens && add_eos_token_ && eos_id_ >= 0) ids.push_back(eos_id_);
  return ids;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  for (int32_t id : ids) check_id(id);

  // SentencePiece drops the "▁" of the first piece it prints, which is HF's "strip one leading
  // space at the start" as long as each call decodes text from the start of the output.
  auto decode_run = [&](const std::vector<int>& run) {
    std::string text;
    const auto status = sp_->Decode(run, &text);
    SERVE8_CHECK(status.ok(), "SentencePiece cannot decode: {}", status.ToString());
    return text;
  };

  std::vector<int> run;
  run.reserve(ids.size());
  if (skip_special_tokens) {
    for (int32_t id : ids) {
      if (!is_special(id)) run.push_back(id);
    }
    return decode_run(run);
  }

  // Special ids print as their piece text. A run of text after one is mid-output, so the space
  // SentencePiece drops from its first piece goes back (HF's fast tokenizer: "<s> Hello</s>").
  std::string out;
  auto flush_run = [&] {
    if (run.empty()) return;
    std::string text = decode_run(run);
    if (!out.empty() && sp_->IdToPiece(run.front()).starts_with(kSpaceSymbol)) text.insert(0, 1, ' ');
    out += text;
    run.clear();
  };
  for (int32_t id : ids) {
    if (is_special(id)) {
      flush_run();
      out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush_run();
  return out;
}

std::string SentencePieceTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                                        bool add_generation_prompt) const {
  return join_segment_text(chat_template_->render(messages, add_generation_prompt));
}

std::vector<int32_t> SentencePieceTokenizer::encode_chat(const std::vector<ChatMessage>& messages,
                                                         bool add_generation_prompt) const {
  return encode_segments(chat_template_->render(messages, add_generation_prompt));
}

const JinjaChatTemplate* SentencePieceTokenizer::jinja_chat_template() const {
  return dynamic_cast<const JinjaChatTemplate*>(chat_template_.get());
}

std::vector<int32_t> SentencePieceTokenizer::encode_chat_values(const jinja::Value& messages, const jinja::Value& tools,
                                                                bool add_generation_prompt) const {
  const JinjaChatTemplate* jinja_template = jinja_chat_template();
  if (jinja_template == nullptr) return Tokenizer::encode_chat_values(messages, tools, add_generation_prompt);
  return encode_segments(jinja::to_segments(jinja_template->render_values(messages, tools, add_generation_prompt)));
}

std::vector<int32_t> SentencePieceTokenizer::encode_segments(const std::vector<ChatSegment>& segments) const {
  std::vector<int32_t> ids;
  for (const ChatSegment& segment : segments) {
    if (segment.bos && bos_id_ >= 0) ids.push_back(bos_id_);
    const std::vector<int32_t> text_ids = encode(segment.text, /*add_special_tokens=*/false);
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    if (segment.eos && eos_id_ >= 0) ids.push_back(eos_id_);
  }
  return ids;
}

void SentencePieceTokenizer::set_chat_template(std::unique_ptr<ChatTemplate> chat_template) {
  SERVE8_CHECK(chat_template != nullptr, "a tokenizer needs a chat template");
  chat_template_ = std::move(chat_template);
}

}  // namespace serve8
