#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/prompt_parts.h"
#include "tokenizer/unicode_nfc.h"
#include "core/utf8.h"

namespace serve8 {
namespace {

void check_utf8(std::string_view text) {
  const std::size_t bad = first_invalid_utf8(text);
  SERVE8_CHECK(bad == text.size(), "the text is not valid UTF-8 (ill-formed or truncated sequence at byte {})", bad);
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeTokenizerSpec spec) : spec_(std::move(spec)) {
  SERVE8_CHECK(spec_.model != nullptr, "{}: the tokenizer has no BPE model", spec_.source);
  vocab_size_ = spec_.model->num_ids();
  std::vector<AddedToken> raw;
  std::vector<AddedToken> normalized;
  for (const AddedToken& token : spec_.added_tokens) {
    SERVE8_CHECK(token.id >= 0, "{}: added token '{}' has the negative id {}", spec_.source, token.content, token.id);
    vocab_size_ = std::max(vocab_size_, token.id + 1);
    // HF matches a normalized token in normalized text, so its spelling is normalized too.
    if (token.normalized && spec_.normalization != Normalization::kNone) {
      AddedToken copy = token;
      copy.content = nfc_normalize(copy.content);
      normalized.push_back(std::move(copy));
    } else if (token.normalized) {
      normalized.push_back(token);
    } else {
      raw.push_back(token);
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw));
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  added_by_id_.assign(static_cast<std::size_t>(vocab_size_), -1);
  for (std::size_t i = 0; i < spec_.added_tokens.size(); ++i) {
    int32_t& slot = added_by_id_[spec_.added_tokens[i].id];
    if (slot < 0) slot = static_cast<int32_t>(i);
  }

  // A config naming a token the vocabulary lacks is a broken file, but one that can still encode.
  auto find_id = [&](const std::string& token, const char* what) {
    if (token.empty()) return -1;
    for (const AddedToken& added : spec_.added_tokens) {
      if (added.content == token) return static_cast<int>(added.id);
    }
    const int id = spec_.model->token_to_id(token);
    if (id < 0) spdlog::warn("{}: the {} '{}' is not in the vocabulary", spec_.source, what, token);
    return id;
  };
  bos_id_ = spec_.bos_id >= 0 ? spec_.bos_id : find_id(spec_.bos_token, "bos_token");
  eos_id_ = spec_.eos_id >= 0 ? spec_.eos_id : find_id(spec_.eos_token, "eos_token");
  SERVE8_CHECK(bos_id_ < vocab_size_ && eos_id_ < vocab_size_, "{}: bos id {} or eos id {} is outside the vocabulary",
               spec_.source, bos_id_, eos_id_);
  if (eos_id_ >= 0) add_eos_id(eos_id_);
  for (int id : spec_.extra_eos_ids) {
    if (id < 0 || id >= vocab_size_) {
      spdlog::warn("{}: eos id {} is outside the vocabulary (size {})", spec_.source, id, vocab_size_);
      continue;
    }
    add_eos_id(id);
  }
  spdlog::debug("loaded BPE tokenizer '{}': {} ids, {} added tokens, bos {}, eos {}", spec_.source, vocab_size_,
                spec_.added_tokens.size(), bos_id_, eos_id_);
}

void BpeTokenizer::check_id(int id) const {
  SERVE8_CHECK(id >= 0 && id < vocab_size_, "token id {} is outside the vocabulary (size {})", id, vocab_size_);
}

bool BpeTokenizer::is_special(int id) const {
  if (id < 0 || id >= vocab_size_ || added_by_id_[id] < 0) return false;
  return spec_.added_tokens[added_by_id_[id]].special;
}

std::string BpeTokenizer::id_to_piece(int id) const {
  check_id(id);
  if (added_by_id_[id] >= 0) return spec_.added_tokens[added_by_id_[id]].content;
  const std::string* token = spec_.model->id_to_token(id);
  SERVE8_CHECK(token != nullptr, "token id {} is not assigned in the vocabulary", id);
  return *token;
}

void BpeTokenizer::encode_words(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  if (!spec_.pre_tokenizer) {
    spec_.model->encode_word(text, ids);
    return;
  }
  std::vector<std::string> words;
  spec_.pre_tokenizer->split(text, words);
  for (const std::string& word : words) spec_.model->encode_word(word, ids);
}

void BpeTokenizer::encode_text(std::string_view text, const Accept& accept, std::vector<int32_t>& ids) const {
  for (const TextPiece& piece : raw_matcher_.split(text, accept)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    const std::string_view raw = text.substr(piece.begin, piece.end - piece.begin);
    std::string normalized;
    if (spec_.normalization == Normalization::kNfc) normalized = nfc_normalize(raw);
    const bool changed = spec_.normalization != Normalization::kNone && normalized != raw;
    const std::string_view piece_text = spec_.normalization == Normalization::kNone ? raw : normalized;
    if (normalized_matcher_.empty()) {
      encode_words(piece_text, ids);
      continue;
    }
    // Offsets into normalized text map back to the raw text only while normalization changed
    // nothing; otherwise the whole piece's raw span stands for any match inside it.
    const Accept accept_normalized = [&](const AddedToken& token, std::size_t begin, std::size_t end) {
      return changed ? accept(token, piece.begin, piece.end) : accept(token, piece.begin + begin, piece.begin + end);
    };
    for (const TextPiece& sub : normalized_matcher_.split(piece_text, accept_normalized)) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
      } else {
        encode_words(piece_text.substr(sub.begin, sub.end - sub.begin), ids);
      }
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  check_utf8(text);
  std::vector<int32_t> ids;
  const bool template_applies = add_special_tokens && spec_.special_template.has_value();
  if (template_applies) ids = spec_.special_template->first;
  if (add_special_tokens && !template_applies && spec_.add_bos_token && bos_id_ >= 0) ids.push_back(bos_id_);
  // Special-token spellings in the text stay text; other added tokens are vocabulary like any word.
  encode_text(
      text, [](const AddedToken& token, std::size_t, std::size_t) { return !token.special; }, ids);
  if (template_applies)
    ids.insert(ids.end(), spec_.special_template->second.begin(), spec_.special_template->second.end());
  if (add_special_tokens && !template_applies && spec_.add_eos_token && eos_id_ >= 0) ids.push_back(eos_id_);
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode_segments(const std::vector<ChatSegment>& segments) const {
  std::vector<int32_t> ids;
  for (const PromptPart& part : to_prompt_parts(segments)) {
    switch (part.kind) {
      case PromptPart::Kind::kBos:
        if (bos_id_ >= 0) ids.push_back(bos_id_);
        break;
      case PromptPart::Kind::kEos:
        if (eos_id_ >= 0) ids.push_back(eos_id_);
        break;
      case PromptPart::Kind::kText:
        check_utf8(part.text);
        encode_text(
            part.text, [&](const AddedToken&, std::size_t begin, std::size_t end) { return part.trusted(begin, end); },
            ids);
        break;
    }
  }
  return ids;
}

std::string BpeTokenizer::token_bytes(int id) const {
  check_id(id);
  const std::string* token = nullptr;
  if (const int32_t added = added_by_id_[id]; added >= 0) {
    if (spec_.added_tokens[added].special) return "";
    token = &spec_.added_tokens[added].content;
  } else {
    token = spec_.model->id_to_token(id);
    if (token == nullptr) return "";
  }
  std::string bytes;
  if (!byte_level_decode(*token, bytes)) bytes = *token;
  return bytes;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  for (int32_t id : ids) check_id(id);
  std::string bytes;
  for (int32_t id : ids) {
    const std::string* token = nullptr;
    if (const int32_t added = added_by_id_[id]; added >= 0) {
      if (skip_special_tokens && spec_.added_tokens[added].special) continue;
      token = &spec_.added_tokens[added].content;
    } else {
      token = spec_.model->id_to_token(id);
      if (token == nullptr) continue;  // an unassigned id decodes to nothing, as in HF
    }
    // Tokens spelled in the byte alphabet are bytes; any other (an added "<｜end｜>") is its text.
    if (!byte_level_decode(*token, bytes)) bytes += *token;
  }
  return replace_invalid_utf8(bytes);
}

}  // namespace serve8
