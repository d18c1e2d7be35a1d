#include "tokenizer/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/test_util.h"

namespace serve8 {
namespace {

using testing::llama2_tokenizer_model;
using testing::TempDir;

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Texts and ids written by SentencePiece's spm_encode (no BOS/EOS), the outside oracle.
std::vector<GoldenCase> golden_cases() {
  const std::string path = std::string(SERVE8_SHARED_DIR) + "/golden/llama2-tokenizer/encode.json";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  const auto golden = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : golden.at("cases")) {
    cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>()});
  }
  return cases;
}

const SentencePieceTokenizer& llama2() {
  static const SentencePieceTokenizer tokenizer(llama2_tokenizer_model());
  return tokenizer;
}

// The ids of "[INST]" and " [/INST]" in Llama-2's vocabulary ("▁[", "INST", "]"...).
const std::vector<int32_t> kInstIds = {518, 25580, 29962};
const std::vector<int32_t> kEndInstIds = {518, 29914, 25580, 29962};

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(SentencePieceTokenizer, Vocabulary) {
  const auto& tok = llama2();
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.eos_ids(), std::vector<int>{2});
  EXPECT_TRUE(tok.is_eos(2));
  EXPECT_FALSE(tok.is_eos(1));
  EXPECT_EQ(tok.id_to_piece(15043), "▁Hello");
  EXPECT_EQ(tok.id_to_piece(13), "<0x0A>");
  EXPECT_EQ(tok.id_to_piece(1), "<s>");
  EXPECT_TRUE(tok.is_special(0));  // <unk>
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_FALSE(tok.is_special(13));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_THROW(tok.id_to_piece(-1), Error);
  EXPECT_THROW(tok.id_to_piece(32000), Error);
}

TEST(SentencePieceTokenizer, EncodeMatchesGolden) {
  const auto cases = golden_cases();
  ASSERT_EQ(cases.size(), 5u);
  for (const auto& c : cases) {
    EXPECT_EQ(llama2().encode(c.text, /*add_special_tokens=*/false), c.ids) << c.text;
  }
}

TEST(SentencePieceTokenizer, AddSpecialTokensPrependsBos) {
  for (const auto& c : golden_cases()) {
    EXPECT_EQ(llama2().encode(c.text, /*add_special_tokens=*/true), concat({{1}, c.ids})) << c.text;
  }
  EXPECT_TRUE(llama2().encode("", false).empty());
  EXPECT_EQ(llama2().encode("", true), std::vector<int32_t>{1});
}

TEST(SentencePieceTokenizer, SpecialTokenTextIsPlainText) {
  const auto ids = llama2().encode("<s>hi</s>", false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0);
  EXPECT_EQ(llama2().decode(ids), "<s>hi</s>");
}

TEST(SentencePieceTokenizer, DecodeRoundTrips) {
  std::vector<std::string> texts = {"Hello world",
                                    "line one\nline two\n\n  indented",
                                    " leading space kept after the first",
                                    "emoji 🎉🚀👍🏽 and a family 👨‍👩‍👧",
                                    "",
                                    "   "};
  for (const auto& c : golden_cases()) texts.push_back(c.text);
  for (const auto& text : texts) {
    EXPECT_EQ(llama2().decode(llama2().encode(text, false)), text) << text;
    EXPECT_EQ(llama2().decode(llama2().encode(text, true)), text) << text;
  }
}

TEST(SentencePieceTokenizer, DecodeSpecialTokens) {
  const std::vector<int32_t> ids = {1, 15043, 3186, 2};  // <s> ▁Hello ▁world </s>
  EXPECT_EQ(llama2().decode(ids), "Hello world");
  EXPECT_EQ(llama2().decode(ids, /*skip_special_tokens=*/false), "<s> Hello world</s>");
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{15043, 2, 3186}, false), "Hello</s> world");
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{0, 15043}), "Hello");
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{0, 15043}, false), "<unk> Hello");
  // Byte-fallback pieces join into characters; an unfinished one prints as U+FFFD per byte.
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{29871, 243, 162, 156, 133}), "🙂");
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{243, 162}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(SentencePieceTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  EXPECT_THROW(llama2().decode(std::vector<int32_t>{15043, 32000}), Error);
  EXPECT_THROW(llama2().decode(std::vector<int32_t>{-5}), Error);
}

TEST(SentencePieceTokenizer, ChatPromptIdsFollowMetasReference) {
  const auto& tok = llama2();
  const std::vector<ChatMessage> single = {{"system", "You are helpful."}, {"user", "Hi"}};
  const std::string text = tok.apply_chat_template(single, true);
  EXPECT_EQ(text, "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]");
  EXPECT_EQ(text.find("<s>"), std::string::npos);
  const auto ids = tok.encode_chat(single, true);
  // For one turn the ids are the text's with its BOS.
  EXPECT_EQ(ids, tok.encode(text, true));
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 4), concat({{1}, kInstIds}));
  EXPECT_EQ(std::vector<int32_t>(ids.end() - 4, ids.end()), kEndInstIds);

  const std::vector<ChatMessage> multi = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
  const auto multi_ids = tok.encode_chat(multi, true);
  const auto expected =
      concat({{1}, tok.encode("[INST] Hi [/INST] Hello! ", false), {2}, {1}, tok.encode("[INST] Bye [/INST]", false)});
  EXPECT_EQ(multi_ids, expected);
  EXPECT_EQ(tok.decode(multi_ids, false), "<s> [INST] Hi [/INST] Hello! </s><s> [INST] Bye [/INST]");
}

TEST(SentencePieceTokenizer, ReadsConfigsBesideTheModel) {
  TempDir dir("sp_configs");
  dir.link_llama2_model();
  dir.write("tokenizer_config.json",
            R"({"add_bos_token": false, "add_eos_token": true, "bos_token": {"content": "<s>", "__type": "AddedToken"},
                "eos_token": "</s>"})");
  dir.write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 13]})");
  const SentencePieceTokenizer tok((dir.path() / "tokenizer.model").string());
  EXPECT_FALSE(tok.add_bos_token());
  EXPECT_TRUE(tok.add_eos_token());
  EXPECT_EQ(tok.encode("Hello", true), (std::vector<int32_t>{15043, 2}));
  EXPECT_EQ(tok.eos_ids(), (std::vector<int>{2, 13}));
  EXPECT_TRUE(tok.is_eos(13));
}

TEST(SentencePieceTokenizer, MalformedConfigNamesTheFile) {
  TempDir dir("sp_bad_config");
  dir.link_llama2_model();
  dir.write("tokenizer_config.json", "{ not json");
  try {
    SentencePieceTokenizer tok((dir.path() / "tokenizer.model").string());
    FAIL() << "a malformed tokenizer_config.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace serve8
