#include "core/utf8.h"

#include <gtest/gtest.h>

namespace serve8 {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii\n"));
  EXPECT_TRUE(is_valid_utf8("naïve café"));
  EXPECT_TRUE(is_valid_utf8("日本語"));
  EXPECT_TRUE(is_valid_utf8("🙂👍🏽"));
  EXPECT_TRUE(is_valid_utf8("\xEF\xBF\xBD"));      // U+FFFD
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last code point
}

TEST(Utf8, RejectsMalformedText) {
  EXPECT_FALSE(is_valid_utf8("\x80"));              // stray continuation
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(is_valid_utf8("\xE0\x80\x80"));      // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // UTF-16 surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(is_valid_utf8("ab\xE2\x82"));  // truncated €
  EXPECT_FALSE(is_valid_utf8("\xE2\x28\xA1"));
}

TEST(Utf8, MeasuresAnUnfinishedTrailingCharacter) {
  EXPECT_EQ(incomplete_utf8_suffix_length(""), 0u);
  EXPECT_EQ(incomplete_utf8_suffix_length("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xE2\x82\xAC"), 0u);  // a complete €
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xE2"), 1u);
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xF0\x9F\x99"), 3u);
  EXPECT_EQ(incomplete_utf8_suffix_length("\xF0"), 1u);
  // Bytes no continuation can repair are not "unfinished": waiting for more would never help.
  EXPECT_EQ(incomplete_utf8_suffix_length("a\x80"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xC0"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xED\xA0"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix_length("a\xF0\x9F\x99\x82\x80"), 0u);
}

TEST(Utf8, TruncatesToTheLongestValidPrefix) {
  EXPECT_EQ(truncate_to_valid_utf8("abc\xE2\x82"), "abc");
  EXPECT_EQ(truncate_to_valid_utf8("ab\x80"
                                   "cd"),
            "ab");
  EXPECT_EQ(truncate_to_valid_utf8("🙂 ok"), "🙂 ok");
  EXPECT_EQ(truncate_to_valid_utf8("\xF0\x9F\x99"), "");
}

}  // namespace
}  // namespace serve8
