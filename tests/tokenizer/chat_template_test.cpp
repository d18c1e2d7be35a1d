#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace serve8 {
namespace {

std::vector<ChatSegment> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) {
  return Llama2ChatTemplate().render(messages, add_generation_prompt);
}

TEST(Llama2ChatTemplate, SystemAndUser) {
  const auto segments = render({{"system", "You are a helpful assistant."}, {"user", "What is 2+2?"}});
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].text, "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nWhat is 2+2? [/INST]");
  EXPECT_TRUE(segments[0].bos);
  EXPECT_FALSE(segments[0].eos);
}

TEST(Llama2ChatTemplate, UserOnly) {
  const auto segments = render({{"user", "Hi"}});
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].text, "[INST] Hi [/INST]");
}

TEST(Llama2ChatTemplate, MultiTurnClosesEachExchangeWithEos) {
  const auto segments =
      render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "How are you?"}});
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].text, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! ");
  EXPECT_TRUE(segments[0].bos);
  EXPECT_TRUE(segments[0].eos);
  EXPECT_EQ(segments[1].text, "[INST] How are you? [/INST]");
  EXPECT_TRUE(segments[1].bos);
  EXPECT_FALSE(segments[1].eos);
  // The joined text carries no special-token markup; BOS/EOS exist only as the segments' flags.
  EXPECT_EQ(join_segment_text(segments),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! [INST] How are you? [/INST]");
}

TEST(Llama2ChatTemplate, StripsContentsAsTheReferenceDoes) {
  const auto segments = render({{"user", "  Hi there \n"}, {"assistant", "\n Hello "}, {"user", "\tbye "}});
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].text, "[INST] Hi there [/INST] Hello ");
  EXPECT_EQ(segments[1].text, "[INST] bye [/INST]");
  // The system block is stripped as part of the first user content: only its outer ends.
  EXPECT_EQ(render({{"system", " sys "}, {"user", ""}})[0].text, "[INST] <<SYS>>\n sys \n<</SYS>> [/INST]");
}

TEST(Llama2ChatTemplate, GenerationPrompt) {
  const std::vector<ChatMessage> ends_with_user = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Again"}};
  // The format's prompt is the user turn's " [/INST]": the flag changes nothing.
  EXPECT_EQ(join_segment_text(render(ends_with_user, true)), join_segment_text(render(ends_with_user, false)));
  EXPECT_TRUE(join_segment_text(render(ends_with_user, true)).ends_with(" [/INST]"));

  const std::vector<ChatMessage> ends_with_assistant = {{"user", "Hi"}, {"assistant", "Hello!"}};
  const auto closed = render(ends_with_assistant, false);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].text, "[INST] Hi [/INST] Hello! ");
  EXPECT_TRUE(closed[0].eos);
  EXPECT_THROW(render(ends_with_assistant, true), Error);
}

TEST(Llama2ChatTemplate, RejectsConversationsOutsideTheFormat) {
  EXPECT_THROW(render({}), Error);
  EXPECT_THROW(render({{"system", "only a system message"}}), Error);
  EXPECT_THROW(render({{"assistant", "first"}}), Error);
  EXPECT_THROW(render({{"user", "a"}, {"user", "b"}}), Error);
  EXPECT_THROW(render({{"user", "a"}, {"system", "late"}}), Error);
  EXPECT_THROW(render({{"tool", "x"}}), Error);
  try {
    render({{"user", "a"}, {"user", "b"}});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("message 1 has role 'user'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace serve8
