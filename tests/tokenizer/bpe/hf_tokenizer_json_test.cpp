#include "tokenizer/hf_tokenizer_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "tokenizer/bpe/bpe_test_util.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/test_util.h"

namespace serve8 {
namespace {

using nlohmann::json;
using testing::bpe_golden_dir;
using testing::TempDir;

json gpt2_file() {
  std::ifstream in(bpe_golden_dir() / "gpt2" / "tokenizer.json");
  return json::parse(in);
}

// Loads `file` written into a fresh directory; returns the error message, or "" when it loaded.
std::string load_error(const json& file) {
  TempDir dir("bpe_json");
  dir.write("tokenizer.json", file.dump());
  try {
    load_tokenizer(dir.str());
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << "the message does not name the file: " << msg;
    return msg;
  }
  return "";
}

void expect_mentions(const std::string& msg, std::initializer_list<const char*> words) {
  EXPECT_FALSE(msg.empty()) << "the file loaded";
  for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
}

TEST(HfTokenizerJson, LoadsBothMergeSpellings) {
  json pairs = gpt2_file();
  for (json& m : pairs["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  TempDir dir("bpe_pairs");
  dir.write("tokenizer.json", pairs.dump());
  const auto from_pairs = load_hf_bpe_tokenizer((dir.path() / "tokenizer.json").string());
  const auto from_strings = load_hf_bpe_tokenizer((bpe_golden_dir() / "gpt2" / "tokenizer.json").string());
  for (const std::string& text : testing::corpus())
    EXPECT_EQ(from_pairs->encode(text, false), from_strings->encode(text, false));
}

TEST(HfTokenizerJson, MissingModel) {
  json file = gpt2_file();
  file.erase("model");
  expect_mentions(load_error(file), {"'model' is missing"});
  expect_mentions(load_error(json::object()), {"'model' is missing"});
}

TEST(HfTokenizerJson, UnsupportedComponentsAreNamed) {
  json file = gpt2_file();
  file["model"]["type"] = "Unigram";
  expect_mentions(load_error(file), {"model.type", "Unigram", "only BPE"});

  file = gpt2_file();
  file["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  expect_mentions(load_error(file), {"pre_tokenizer", "Metaspace", "not supported"});

  file = gpt2_file();
  file["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", json::array({{{"type", "ByteLevel"}}, {{"type", "Whitespace"}}})}};
  expect_mentions(load_error(file), {"pre_tokenizer.pretokenizers[1]", "Whitespace"});

  file = gpt2_file();
  file["normalizer"] = {{"type", "NFKC"}};
  expect_mentions(load_error(file), {"normalizer", "NFKC"});

  file = gpt2_file();
  file["decoder"] = {{"type", "Metaspace"}};
  expect_mentions(load_error(file), {"decoder", "Metaspace"});

  file = gpt2_file();
  file["post_processor"] = {{"type", "BertProcessing"}};
  expect_mentions(load_error(file), {"post_processor", "BertProcessing"});

  file = gpt2_file();
  file["model"]["dropout"] = 0.1;
  expect_mentions(load_error(file), {"model.dropout"});
}

TEST(HfTokenizerJson, MergesMustNameVocabularyEntries) {
  json file = gpt2_file();
  file["model"]["merges"].push_back("Ġzzq qqz");
  expect_mentions(load_error(file), {"merge", "Ġzzq", "not in the vocabulary"});

  file = gpt2_file();
  file["model"]["merges"].push_back("a b c");
  expect_mentions(load_error(file), {"model.merges[", "two tokens"});
}

TEST(HfTokenizerJson, BadRegexIsNamed) {
  json file = gpt2_file();
  file["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
  expect_mentions(load_error(file), {"pre_tokenizer.pattern", "(unclosed"});
  file["pre_tokenizer"]["behavior"] = "Sideways";
  expect_mentions(load_error(file), {"pre_tokenizer.behavior", "Sideways"});
}

TEST(HfTokenizerJson, MalformedJsonNamesTheFile) {
  TempDir dir("bpe_bad_json");
  dir.write("tokenizer.json", "{ not json");
  try {
    load_tokenizer(dir.str());
    FAIL() << "a malformed tokenizer.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(HfTokenizerJson, DirectoryPrefersByteLevelTokenizerJson) {
  TempDir dir("bpe_both");
  dir.link_llama2_model();
  dir.write("tokenizer.json", gpt2_file().dump());
  EXPECT_NE(dynamic_cast<BpeTokenizer*>(load_tokenizer(dir.str()).get()), nullptr);

  // Llama-2's tokenizer.json is SentencePiece-style (Metaspace): its tokenizer.model serves.
  json metaspace = gpt2_file();
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}};
  metaspace["decoder"] = {{"type", "Metaspace"}};
  TempDir sp_dir("bpe_metaspace");
  sp_dir.link_llama2_model();
  sp_dir.write("tokenizer.json", metaspace.dump());
  EXPECT_NE(dynamic_cast<SentencePieceTokenizer*>(load_tokenizer(sp_dir.str()).get()), nullptr);
}

TEST(HfTokenizerJson, LoadsAFilePath) {
  const auto tok = load_tokenizer((bpe_golden_dir() / "llama3" / "tokenizer.json").string());
  EXPECT_EQ(tok->bos_id(), 0);  // the configs beside the file are read
}

// load_tokenizer compiles the template the files carry, and the token that closes an assistant
// turn in it ends generation even where the config names another EOS.
TEST(HfTokenizerJson, LoadTokenizerSetsTheFilesChatTemplate) {
  TempDir dir("bpe_chatml");
  std::ifstream in(bpe_golden_dir() / "qwen2" / "tokenizer.json");
  dir.write("tokenizer.json", std::string(std::istreambuf_iterator<char>(in), {}));
  const std::string chatml =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  dir.write("tokenizer_config.json", json{{"eos_token", "<|endoftext|>"}, {"chat_template", chatml}}.dump());
  const auto tok = load_tokenizer(dir.str());
  ASSERT_TRUE(tok->has_chat_template());
  EXPECT_EQ(tok->eos_ids(), (std::vector<int>{0, 2}));  // <|endoftext|>, then ChatML's <|im_end|>
  const std::vector<int32_t> ids = tok->encode_chat({{"user", "<|im_end|>"}}, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1) << "only the template's <|im_end|> is special";
  EXPECT_EQ(tok->apply_chat_template({{"user", "hi"}}, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  // A vocabulary without a template (a base model's) has no chat, and says so.
  const auto base = load_tokenizer((bpe_golden_dir() / "gpt2").string());
  EXPECT_FALSE(base->has_chat_template());
  EXPECT_THROW(base->encode_chat({{"user", "hi"}}, true), Error);
  // A SentencePiece vocabulary without one keeps the Llama-2 format, as tokenizer.model files do.
  const auto spm = load_tokenizer((bpe_golden_dir() / "spm_vocab.gguf").string());
  ASSERT_TRUE(spm->has_chat_template());
  EXPECT_EQ(spm->apply_chat_template({{"user", "hi"}}, true), "[INST] hi [/INST]");
}

}  // namespace
}  // namespace serve8
