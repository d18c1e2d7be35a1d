#include "tokenizer/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "tokenizer/bpe/bpe_test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/test_util.h"

namespace serve8 {
namespace {

using testing::bpe_golden_dir;
using testing::TempDir;

// Just enough of a GGUF writer for malformed-file tests: metadata, no tensors.
class GgufBytes {
 public:
  GgufBytes& string(const std::string& key, const std::string& value) {
    this->key(key, 8);
    str(value);
    return *this;
  }
  GgufBytes& strings(const std::string& key, const std::vector<std::string>& values) {
    this->key(key, 9);
    pod<uint32_t>(8);
    pod<uint64_t>(values.size());
    for (const auto& v : values) str(v);
    return *this;
  }
  std::string bytes() const {
    std::string out = "GGUF";
    auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(uint32_t{3});
    put(uint64_t{0});
    put(static_cast<uint64_t>(count_));
    return out + body_;
  }

 private:
  template <typename T>
  void pod(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    body_ += s;
  }
  void key(const std::string& k, uint32_t type) {
    ++count_;
    str(k);
    pod<uint32_t>(type);
  }
  std::string body_;
  int count_ = 0;
};

std::string load_error(const std::string& contents) {
  TempDir dir("gguf_bad");
  const std::string path = (dir.path() / "model.gguf").string();
  std::ofstream(path, std::ios::binary) << contents;
  try {
    load_tokenizer(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.gguf"), std::string::npos) << "the message does not name the file: " << msg;
    return msg;
  }
  return "";
}

GgufBytes tiny_gpt2(const std::string& pre) {
  GgufBytes g;
  g.string("general.architecture", "llama").string("tokenizer.ggml.model", "gpt2");
  if (!pre.empty()) g.string("tokenizer.ggml.pre", pre);
  g.strings("tokenizer.ggml.tokens", {"a", "b", "ab"}).strings("tokenizer.ggml.merges", {"a b"});
  return g;
}

TEST(GgufTokenizer, ReadsTheVocabularyMetadata) {
  const GgufVocab vocab = read_gguf_vocab((bpe_golden_dir() / "llama3_vocab.gguf").string());
  EXPECT_EQ(vocab.model, "gpt2");
  EXPECT_EQ(vocab.pre, "llama-bpe");
  EXPECT_EQ(vocab.tokens.size(), vocab.token_types.size());
  EXPECT_FALSE(vocab.merges.empty());
  EXPECT_EQ(vocab.bos_id, 0);
  EXPECT_EQ(vocab.add_bos, true);
  EXPECT_FALSE(vocab.chat_template.empty());
}

TEST(GgufTokenizer, TinyVocabularyEncodes) {
  TempDir dir("gguf_tiny");
  const std::string path = (dir.path() / "tiny.gguf").string();
  std::ofstream(path, std::ios::binary) << tiny_gpt2("gpt2").bytes();
  const auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->encode("abba", false), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(tok->bos_id(), -1);
}

TEST(GgufTokenizer, UnknownPreTokenizerIsNamed) {
  const std::string msg = load_error(tiny_gpt2("made-up-bpe").bytes());
  EXPECT_NE(msg.find("tokenizer.ggml.pre 'made-up-bpe'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("smollm"), std::string::npos) << "the known names are listed: " << msg;
  EXPECT_TRUE(is_known_gguf_pre_tokenizer("qwen2"));
  EXPECT_FALSE(is_known_gguf_pre_tokenizer("made-up-bpe"));
}

TEST(GgufTokenizer, UnsupportedOrMissingModelIsNamed) {
  GgufBytes bert;
  bert.string("tokenizer.ggml.model", "bert").strings("tokenizer.ggml.tokens", {"a"});
  EXPECT_NE(load_error(bert.bytes()).find("tokenizer.ggml.model 'bert' is not supported"), std::string::npos);
  GgufBytes none;
  none.string("general.architecture", "llama");
  EXPECT_NE(load_error(none.bytes()).find("tokenizer.ggml.model is missing"), std::string::npos);
}

TEST(GgufTokenizer, MergesMustNameVocabularyEntries) {
  GgufBytes g;
  g.string("tokenizer.ggml.model", "gpt2").string("tokenizer.ggml.pre", "gpt2");
  g.strings("tokenizer.ggml.tokens", {"a", "b"}).strings("tokenizer.ggml.merges", {"a b"});
  const std::string msg = load_error(g.bytes());
  EXPECT_NE(msg.find("makes 'ab', which is not in the vocabulary"), std::string::npos) << msg;
}

TEST(GgufTokenizer, MalformedFilesAreNamed) {
  EXPECT_NE(load_error("this is not a gguf file at all").find("not a GGUF file (bad magic)"), std::string::npos);
  const std::string whole = tiny_gpt2("gpt2").bytes();
  EXPECT_NE(load_error(whole.substr(0, 10)).find("10 bytes is too short for a GGUF header"), std::string::npos);
  const std::string cut = load_error(whole.substr(0, whole.size() - 3));
  EXPECT_NE(cut.find("truncated: a string value needs"), std::string::npos) << cut;
  GgufBytes wrong_type;
  wrong_type.strings("tokenizer.ggml.model", {"gpt2"});
  EXPECT_NE(load_error(wrong_type.bytes()).find("metadata 'tokenizer.ggml.model' is not a string"), std::string::npos);
}

TEST(GgufTokenizer, SmolLm2Metadata) {
  const std::string path = testing::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found under " << testing::models_dir();
  const auto tok = load_tokenizer(path);
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(tok.get());
  ASSERT_NE(bpe, nullptr);
  const auto golden = testing::read_golden("smollm2_gguf_expected.json");
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(bpe->bos_token(), golden.at("bos_token").get<std::string>());
  EXPECT_EQ(bpe->eos_token(), golden.at("eos_token").get<std::string>());
  EXPECT_EQ(bpe->chat_template_source(), golden.at("chat_template").get<std::string>());
  EXPECT_EQ(tok->eos_ids(), std::vector<int>{2});
  EXPECT_EQ(tok->encode("Hello", true), tok->encode("Hello", false));  // add_bos_token is false
}

}  // namespace
}  // namespace serve8
