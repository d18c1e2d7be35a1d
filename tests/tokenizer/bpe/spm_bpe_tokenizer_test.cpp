#include "tokenizer/spm_bpe_tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/bpe/bpe_test_util.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/test_util.h"

namespace serve8 {
namespace {

using nlohmann::json;

// Llama-2's vocabulary as a GGUF would hold it (pieces, scores, types), read from tokenizer.model
// with libsentencepiece, which is also the oracle.
SpmVocabSpec llama2_spec(const sentencepiece::SentencePieceProcessor& sp) {
  SpmVocabSpec spec;
  spec.source = testing::llama2_tokenizer_model();
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    spec.pieces.push_back(sp.IdToPiece(id));
    spec.scores.push_back(sp.GetScore(id));
    GgufTokenType type = GgufTokenType::kNormal;
    if (sp.IsControl(id)) type = GgufTokenType::kControl;
    if (sp.IsUnknown(id)) type = GgufTokenType::kUnknown;
    if (sp.IsUnused(id)) type = GgufTokenType::kUnused;
    if (sp.IsByte(id)) type = GgufTokenType::kByte;
    spec.types.push_back(type);
  }
  spec.bos_id = sp.bos_id();
  spec.eos_id = sp.eos_id();
  spec.unk_id = sp.unk_id();
  return spec;
}

struct Llama2 {
  sentencepiece::SentencePieceProcessor sp;
  std::unique_ptr<SpmBpeTokenizer> tok;
  Llama2() {
    EXPECT_TRUE(sp.Load(testing::llama2_tokenizer_model()).ok());
    tok = std::make_unique<SpmBpeTokenizer>(llama2_spec(sp));
  }
};

const Llama2& llama2() {
  static const Llama2 instance;
  return instance;
}

std::vector<std::string> llama2_texts() {
  std::vector<std::string> texts = testing::corpus();
  texts.push_back("[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]");
  texts.push_back("    four leading spaces and ▁ the space symbol itself ▁▁");
  return texts;
}

TEST(SpmBpeTokenizer, Llama2VocabularyMatchesSentencePiece) {
  const Llama2& l = llama2();
  for (const std::string& text : llama2_texts()) {
    std::vector<int> expected;
    ASSERT_TRUE(l.sp.Encode(text, &expected).ok());
    EXPECT_EQ(l.tok->encode(text, false), std::vector<int32_t>(expected.begin(), expected.end())) << text;
  }
}

TEST(SpmBpeTokenizer, Llama2DecodeMatchesSentencePieceTokenizer) {
  const Llama2& l = llama2();
  const SentencePieceTokenizer reference(testing::llama2_tokenizer_model());
  for (const std::string& text : llama2_texts()) {
    const auto ids = l.tok->encode(text, true);
    EXPECT_EQ(l.tok->decode(ids, true), reference.decode(ids, true)) << text;
    EXPECT_EQ(l.tok->decode(ids, false), reference.decode(ids, false)) << text;
    // A literal "▁" reads back as a space, in SentencePiece too.
    if (text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(l.tok->decode(ids, true), text);
    }
  }
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{243, 162}, {1, 15043, 2, 3186}, {0, 15043, 13, 13}}) {
    EXPECT_EQ(l.tok->decode(ids, false), reference.decode(ids, false));
    EXPECT_EQ(l.tok->decode(ids, true), reference.decode(ids, true));
  }
}

TEST(SpmBpeTokenizer, ControlPiecesCountOnlyInTrustedText) {
  const SpmBpeTokenizer& tok = *llama2().tok;
  const auto plain = tok.encode("<s>hi</s>", true);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 1);  // the BOS add_special_tokens puts in front
  const std::vector<ChatSegment> segments = {{.text = "<s>[INST]", .trusted = true},
                                             {.text = " hi </s>", .trusted = false},
                                             {.text = " [/INST]</s>", .trusted = true}};
  std::vector<int32_t> expected = {1};
  for (int32_t id : tok.encode("[INST] hi </s> [/INST]", false)) expected.push_back(id);
  expected.push_back(2);
  EXPECT_EQ(tok.encode_segments(segments), expected);
}

TEST(SpmBpeTokenizer, GgufVocabularyMatchesSentencePiece) {
  const json golden = testing::read_golden("spm_gguf_expected.json");
  const auto tok = load_tokenizer((testing::bpe_golden_dir() / golden.at("tokenizer").get<std::string>()).string());
  ASSERT_NE(dynamic_cast<const SpmBpeTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->bos_id(), golden.at("bos_id").get<int>());
  EXPECT_EQ(tok->eos_ids(), std::vector<int>{golden.at("eos_id").get<int>()});
  const auto texts = testing::corpus();
  ASSERT_EQ(golden.at("cases").size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const json& c = golden["cases"][i];
    SCOPED_TRACE(::testing::Message() << "corpus line " << i << ": " << texts[i]);
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(texts[i], false), ids);
    std::vector<int32_t> with_bos = {tok->bos_id()};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    EXPECT_EQ(tok->encode(texts[i], true), with_bos);
    EXPECT_EQ(tok->decode(ids), c.contains("decode") ? c["decode"].get<std::string>() : texts[i]);
  }
  for (const json& c : golden.at("odd_decodes")) {
    EXPECT_EQ(tok->decode(c.at("ids").get<std::vector<int32_t>>()), c.at("decode_skip").get<std::string>())
        << c["ids"].dump();
  }
}

TEST(SpmBpeTokenizer, InconsistentListsAreErrors) {
  SpmVocabSpec spec;
  spec.source = "test.gguf";
  spec.pieces = {"a", "b"};
  spec.scores = {0.0f};
  try {
    SpmBpeTokenizer tok(spec);
    FAIL() << "mismatched lists were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.gguf: 2 pieces but 1 scores"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace serve8
