#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace serve8 {
namespace {

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string> words;
  p.split(text, words);
  return words;
}

TEST(ByteLevel, AlphabetRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string spelled = byte_level_encode(all);
  std::string back;
  ASSERT_TRUE(byte_level_decode(spelled, back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(byte_level_encode(" \n"), "ĠĊ");
  EXPECT_FALSE(byte_level_decode("▁", back));  // not in the alphabet
}

TEST(PreTokenizer, Gpt2Split) {
  const ByteLevelPreTokenizer p(false, true);
  EXPECT_EQ(split(p, "I'm  here 123!"), (std::vector<std::string>{"I", "'m", "Ġ", "Ġhere", "Ġ123", "!"}));
  const ByteLevelPreTokenizer prefixed(true, true);
  EXPECT_EQ(split(prefixed, "Hi"), (std::vector<std::string>{"ĠHi"}));
  EXPECT_TRUE(split(prefixed, "").empty());
}

TEST(PreTokenizer, Llama3SplitGroupsThreeDigits) {
  const auto p = SplitPreTokenizer::regex(kLlama3SplitPattern, SplitBehavior::kIsolated, false);
  EXPECT_EQ(split(*p, "1234567 ab"), (std::vector<std::string>{"123", "456", "7", " ab"}));
}

TEST(PreTokenizer, SplitBehaviours) {
  const std::string text = "a,b,,c";
  auto words = [&](SplitBehavior b, bool invert = false) {
    return split(*SplitPreTokenizer::literal(",", b, invert), text);
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(words(SplitBehavior::kRemoved), (V{"a", "b", "c"}));
  EXPECT_EQ(words(SplitBehavior::kIsolated), (V{"a", ",", "b", ",", ",", "c"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithPrevious), (V{"a,", "b,", ",", "c"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithNext), (V{"a", ",b", ",", ",c"}));
  EXPECT_EQ(words(SplitBehavior::kContiguous), (V{"a", ",", "b", ",,", "c"}));
  // Inverted, the commas are the text between matches; ",," is two matches, so two words.
  EXPECT_EQ(words(SplitBehavior::kRemoved, true), (V{",", ",", ","}));
}

TEST(PreTokenizer, BadRegexNamesThePattern) {
  try {
    SplitPreTokenizer::regex("[unclosed", SplitBehavior::kIsolated, false);
    FAIL() << "a bad regex compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[unclosed"), std::string::npos) << e.what();
  }
}

TEST(PreTokenizer, LongInputsDoNotOverflow) {
  const ByteLevelPreTokenizer p(false, true);
  const std::string spaces(200000, ' ');
  const auto words = split(p, spaces + "x");
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[1], "Ġx");
}

}  // namespace
}  // namespace serve8
