#include "tokenizer/gguf_tokenizer.h"

#include <array>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/spm_bpe_tokenizer.h"

namespace serve8 {
namespace {

enum class PreKind { kGpt2, kSmolLm, kLlama3, kQwen2 };

struct PreName {
  const char* name;
  PreKind kind;
};

// llama.cpp's names for the pre-tokenizers of the model families serve8 serves.
constexpr std::array kPreNames = {
    PreName{"default", PreKind::kGpt2},     PreName{"gpt2", PreKind::kGpt2},
    PreName{"gpt-2", PreKind::kGpt2},       PreName{"smollm", PreKind::kSmolLm},
    PreName{"llama-bpe", PreKind::kLlama3}, PreName{"llama3", PreKind::kLlama3},
    PreName{"llama-v3", PreKind::kLlama3},  PreName{"smaug-bpe", PreKind::kLlama3},
    PreName{"qwen2", PreKind::kQwen2},      PreName{"deepseek-r1-qwen", PreKind::kQwen2},
};

const PreName* find_pre(const std::string& pre) {
  for (const PreName& p : kPreNames) {
    if (pre == p.name) return &p;
  }
  return nullptr;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(PreKind kind) {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  switch (kind) {
    case PreKind::kGpt2:
      return std::make_unique<ByteLevelPreTokenizer>(/*add_prefix_space=*/false, /*use_regex=*/true);
    case PreKind::kSmolLm:
      // SmolLM2's tokenizer.json: digits one by one, then GPT-2's split.
      steps.push_back(make_digits_pre_tokenizer(/*individual_digits=*/true));
      steps.push_back(std::make_unique<ByteLevelPreTokenizer>(false, true));
      break;
    case PreKind::kLlama3:
      steps.push_back(SplitPreTokenizer::regex(kLlama3SplitPattern, SplitBehavior::kIsolated, false));
      steps.push_back(std::make_unique<ByteLevelPreTokenizer>(false, false));
      break;
    case PreKind::kQwen2:
      steps.push_back(SplitPreTokenizer::regex(kQwen2SplitPattern, SplitBehavior::kIsolated, false));
      steps.push_back(std::make_unique<ByteLevelPreTokenizer>(false, false));
      break;
  }
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

GgufTokenType type_of(const GgufVocab& vocab, std::size_t id) {
  return vocab.token_types.empty() ? GgufTokenType::kNormal : static_cast<GgufTokenType>(vocab.token_types[id]);
}

int optional_id(const GgufVocab& vocab, const std::optional<int64_t>& id, const char* key) {
  if (!id) return -1;
  // Some converters write -1 (or a huge unsigned) for "none".
  if (*id < 0 || *id >= static_cast<int64_t>(vocab.tokens.size())) {
    if (*id >= 0) spdlog::warn("{}: {} {} is outside the vocabulary; ignored", vocab.source, key, *id);
    return -1;
  }
  return static_cast<int>(*id);
}

std::vector<int> end_of_turn_ids(const GgufVocab& vocab) {
  std::vector<int> ids;
  for (const auto& [id, key] : {std::pair{vocab.eot_id, "tokenizer.ggml.eot_token_id"},
                                std::pair{vocab.eom_id, "tokenizer.ggml.eom_token_id"}}) {
    if (const int v = optional_id(vocab, id, key); v >= 0) ids.push_back(v);
  }
  return ids;
}

// Whether every character of `token` is in GPT-2's byte alphabet.
bool is_byte_level_spelled(const std::string& token) {
  std::string bytes;
  return byte_level_decode(token, bytes);
}

std::unique_ptr<Tokenizer> make_byte_level(const GgufVocab& vocab) {
  const std::string& source = vocab.source;
  const std::size_t n = vocab.tokens.size();
  SERVE8_CHECK(n > 0, "GGUF file '{}': tokenizer.ggml.tokens is missing or empty", source);
  SERVE8_CHECK(vocab.token_types.empty() || vocab.token_types.size() == n,
               "GGUF file '{}': tokenizer.ggml.token_type has {} entries for {} tokens", source,
               vocab.token_types.size(), n);
  std::string pre_name = vocab.pre;
  if (pre_name.empty()) {
    spdlog::warn("GGUF file '{}' names no tokenizer.ggml.pre; using GPT-2's pre-tokenizer, as llama.cpp does", source);
    pre_name = "default";
  }
  const PreName* pre = find_pre(pre_name);
  if (pre == nullptr) {
    std::string known;
    for (const PreName& p : kPreNames) {
      if (!known.empty()) known += ", ";
      known += p.name;
    }
    fail("GGUF file '{}': tokenizer.ggml.pre '{}' is not a pre-tokenizer serve8 knows (known: {})", source, pre_name,
         known);
  }

  BpeTokenizerSpec spec;
  spec.source = source;
  // Vocabulary entries outside the byte alphabet (an added "<｜end｜>") are respelled so the
  // vocabulary stays byte-level; they are matched as added tokens, never formed by merges.
  std::vector<std::string> tokens;
  tokens.reserve(n);
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& token = vocab.tokens[id];
    const bool spelled = is_byte_level_spelled(token);
    tokens.push_back(spelled ? token : byte_level_encode(token));
    // Control tokens become special added tokens, user-defined ones plain added tokens, both
    // only when spelled in the alphabet: HF's GGUF conversion skips the others as mislabels.
    const GgufTokenType type = type_of(vocab, id);
    if ((type == GgufTokenType::kControl || type == GgufTokenType::kUserDefined) && spelled) {
      spec.added_tokens.push_back(
          {.content = token, .id = static_cast<int32_t>(id), .special = type == GgufTokenType::kControl});
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(vocab.merges.size());
  for (std::size_t i = 0; i < vocab.merges.size(); ++i) {
    const std::string& m = vocab.merges[i];
    const auto space = m.find(' ', 1);
    SERVE8_CHECK(space != std::string::npos && space + 1 < m.size(),
                 "GGUF file '{}': tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space", source, i, m);
    merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  BpeOptions options;
  options.ignore_merges = pre->kind == PreKind::kLlama3;  // Llama-3's tokenizer.json sets it
  spec.model = std::make_unique<BpeModel>(std::move(tokens), merges, options,
                                          fmt::format("GGUF file '{}': tokenizer.ggml", source));
  spec.pre_tokenizer = make_pre_tokenizer(pre->kind);
  spec.add_bos_token = vocab.add_bos.value_or(false);
  spec.add_eos_token = vocab.add_eos.value_or(false);
  spec.bos_id = optional_id(vocab, vocab.bos_id, "tokenizer.ggml.bos_token_id");
  spec.eos_id = optional_id(vocab, vocab.eos_id, "tokenizer.ggml.eos_token_id");
  if (spec.bos_id >= 0) spec.bos_token = vocab.tokens[spec.bos_id];
  if (spec.eos_id >= 0) spec.eos_token = vocab.tokens[spec.eos_id];
  spec.extra_eos_ids = end_of_turn_ids(vocab);
  spec.chat_template = vocab.chat_template;
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

std::unique_ptr<Tokenizer> make_sentencepiece(const GgufVocab& vocab) {
  SpmVocabSpec spec;
  spec.source = vocab.source;
  spec.pieces = vocab.tokens;
  spec.scores = vocab.scores;
  spec.types.reserve(vocab.token_types.size());
  for (int32_t t : vocab.token_types) spec.types.push_back(static_cast<GgufTokenType>(t));
  SERVE8_CHECK(!spec.pieces.empty(), "GGUF file '{}': tokenizer.ggml.tokens is missing or empty", vocab.source);
  SERVE8_CHECK(!spec.scores.empty(),
               "GGUF file '{}': tokenizer.ggml.scores is missing; a SentencePiece vocabulary "
               "needs the piece scores",
               vocab.source);
  spec.bos_id = optional_id(vocab, vocab.bos_id, "tokenizer.ggml.bos_token_id");
  spec.eos_id = optional_id(vocab, vocab.eos_id, "tokenizer.ggml.eos_token_id");
  spec.unk_id = optional_id(vocab, vocab.unk_id, "tokenizer.ggml.unknown_token_id");
  spec.add_bos = vocab.add_bos.value_or(true);
  spec.add_eos = vocab.add_eos.value_or(false);
  spec.add_space_prefix = vocab.add_space_prefix.value_or(true);
  spec.extra_eos_ids = end_of_turn_ids(vocab);
  spec.chat_template = vocab.chat_template;
  return std::make_unique<SpmBpeTokenizer>(std::move(spec));
}

}  // namespace

bool is_known_gguf_pre_tokenizer(const std::string& pre) { return find_pre(pre) != nullptr; }

std::unique_ptr<Tokenizer> make_gguf_tokenizer(const GgufVocab& vocab) {
  if (vocab.model == "gpt2") return make_byte_level(vocab);
  if (vocab.model == "llama") return make_sentencepiece(vocab);
  SERVE8_CHECK(!vocab.model.empty(), "GGUF file '{}' has no tokenizer (tokenizer.ggml.model is missing)", vocab.source);
  fail("GGUF file '{}': tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)", vocab.source,
       vocab.model);
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  return make_gguf_tokenizer(read_gguf_vocab(path));
}

}  // namespace serve8
