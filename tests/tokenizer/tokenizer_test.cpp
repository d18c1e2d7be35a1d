#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/test_util.h"

namespace serve8 {
namespace {

using testing::llama2_tokenizer_dir;
using testing::llama2_tokenizer_model;
using testing::TempDir;

// Runs load_tokenizer and returns its error message, or "" when it loaded.
std::string load_error(const std::string& path) {
  try {
    load_tokenizer(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoadTokenizer, FindsTokenizerModelInADirectory) {
  const auto tok = load_tokenizer(llama2_tokenizer_dir());
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->encode("Hello", true), (std::vector<int32_t>{1, 15043}));
}

TEST(LoadTokenizer, LoadsAModelFile) {
  const auto tok = load_tokenizer(llama2_tokenizer_model());
  EXPECT_EQ(tok->bos_id(), 1);
}

TEST(LoadTokenizer, MissingPathNamesIt) {
  const std::string path = "/nonexistent/serve8/model-dir";
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(LoadTokenizer, DirectoryWithoutTokenizerSaysWhatWasLookedFor) {
  TempDir dir("empty_model_dir");
  const std::string msg = load_error(dir.str());
  EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.model"), std::string::npos) << msg;
}

TEST(LoadTokenizer, BrokenTokenizerJsonNamesItAndTheField) {
  TempDir dir("json_model_dir");
  dir.write("tokenizer.json", "{}");
  const std::string msg = load_error(dir.str());
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model' is missing"), std::string::npos) << msg;
  EXPECT_NE(load_error((dir.path() / "tokenizer.json").string()).find("'model' is missing"), std::string::npos);
}

TEST(LoadTokenizer, CorruptModelFileNamesIt) {
  TempDir dir("corrupt_model");
  dir.write("tokenizer.model", "this is not a protobuf");
  const std::string msg = load_error(dir.str());
  EXPECT_NE(msg.find("tokenizer.model"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
}

}  // namespace
}  // namespace serve8
