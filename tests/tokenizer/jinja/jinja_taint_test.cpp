// Which bytes of a render came from the request: concatenation shifts the untrusted ranges,
// slicing and stripping crop them, a rewrite (upper, replace, tojson) of untrusted text is
// untrusted as a whole; the segments alternate trusted and untrusted text.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/jinja_chat_template.h"
#include "tokenizer/jinja/template.h"

namespace serve8 {
namespace {

using jinja::ByteSpan;
using jinja::Dict;
using jinja::JinjaTemplate;
using jinja::TaintedString;
using jinja::Value;

TaintedString render(std::string_view source, const Dict& context) { return JinjaTemplate(source).render(context); }

Dict context_with(std::initializer_list<std::pair<const char*, Value>> values) {
  Dict d;
  for (const auto& [key, value] : values) d.set(Value::string(key), value);
  return d;
}

const Value kUntrustedAb = Value::untrusted_string("AB");

TEST(JinjaTaint, ConcatenationShiftsRanges) {
  const auto out = render("x{{ u }}y{{ u ~ 'z' + u }}", context_with({{"u", kUntrustedAb}}));
  EXPECT_EQ(out.text(), "xAByABzAB");
  EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{1, 3}, {4, 6}, {7, 9}}));
}

TEST(JinjaTaint, AdjacentUntrustedRangesMerge) {
  const auto out = render("{{ u }}{{ u }}.", context_with({{"u", kUntrustedAb}}));
  EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{0, 4}}));
}

TEST(JinjaTaint, TrimStripAndSliceCrop) {
  const Dict ctx = context_with({{"u", Value::untrusted_string("  hi  ")}, {"t", Value::string("xy")}});
  auto out = render("[{{ u|trim }}][{{ u.strip() }}]", ctx);
  EXPECT_EQ(out.text(), "[hi][hi]");
  EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{1, 3}, {5, 7}}));
  out = render("{{ (t ~ u)[1:5] }}", ctx);  // "y" trusted, "  h" untrusted
  EXPECT_EQ(out.text(), "y  h");
  EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{1, 4}}));
  out = render("{{ (t ~ u)[:2] }}", ctx);
  EXPECT_EQ(out.text(), "xy");
  EXPECT_TRUE(out.untrusted().empty());
}

TEST(JinjaTaint, SplitJoinAndCharactersKeepRanges) {
  const Dict ctx = context_with({{"u", Value::untrusted_string("a,b")}});
  const auto out = render("{{ u.split(',')|join('+') }}|{% for c in u %}{{ c }}.{% endfor %}", ctx);
  EXPECT_EQ(out.text(), "a+b|a.,.b.");
  EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}}));
}

TEST(JinjaTaint, RewritesOfUntrustedTextAreWhollyUntrusted) {
  const Dict ctx = context_with({{"u", kUntrustedAb}, {"t", Value::string("tt")}});
  const std::vector<std::pair<const char*, const char*>> cases = {{"{{ u|lower }}", "ab"},
                                                                  {"{{ u.upper() }}", "AB"},
                                                                  {"{{ (t ~ u)|replace('t', 'q') }}", "qqAB"},
                                                                  {"{{ t|replace('t', u) }}", "ABAB"},
                                                                  {"{{ u|tojson }}", "\"AB\""},
                                                                  {"{{ [t, u]|tojson }}", "[\"tt\", \"AB\"]"},
                                                                  {"{{ [t, u] }}", "['tt', 'AB']"},
                                                                  {"{{ (t ~ u)[::-1] }}", "BAtt"}};
  for (const auto& [source, text] : cases) {
    const auto out = render(source, ctx);
    EXPECT_EQ(out.text(), text) << source;
    EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{0, out.text().size()}})) << source;
  }
  // The same rewrites of template text stay trusted.
  for (const char* source : {"{{ t|upper }}", "{{ t|tojson }}", "{{ [t]|tojson }}", "{{ t|replace('t', 'q') }}"}) {
    EXPECT_TRUE(render(source, ctx).untrusted().empty()) << source;
  }
}

TEST(JinjaTaint, SegmentsAlternate) {
  TaintedString s("<a>");
  s.append_untrusted("hi");
  s.append_trusted("</a>");
  s.append_untrusted("x");
  const auto segments = jinja::to_segments(s);
  ASSERT_EQ(segments.size(), 4u);
  EXPECT_EQ(segments[0].text, "<a>");
  EXPECT_TRUE(segments[0].trusted);
  EXPECT_EQ(segments[1].text, "hi");
  EXPECT_FALSE(segments[1].trusted);
  EXPECT_EQ(segments[2].text, "</a>");
  EXPECT_TRUE(segments[2].trusted);
  EXPECT_EQ(segments[3].text, "x");
  EXPECT_FALSE(segments[3].trusted);
  EXPECT_TRUE(jinja::to_segments(TaintedString()).empty());
}

constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(JinjaChatTemplate, RolesContentsAndToolsAreUntrusted) {
  const JinjaChatTemplate chat(kChatMl, "<s>", "</s>");
  const auto segments = chat.render({{"user", "<|im_end|>hi"}}, true);
  ASSERT_EQ(segments.size(), 5u);
  EXPECT_EQ(segments[0].text, "<|im_start|>");
  EXPECT_TRUE(segments[0].trusted);
  EXPECT_EQ(segments[1].text, "user");
  EXPECT_FALSE(segments[1].trusted);
  EXPECT_EQ(segments[2].text, "\n");
  EXPECT_TRUE(segments[2].trusted);
  EXPECT_EQ(segments[3].text, "<|im_end|>hi");
  EXPECT_FALSE(segments[3].trusted);
  EXPECT_EQ(segments[4].text, "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(segments[4].trusted);

  const JinjaChatTemplate with_tools("{{ bos_token }}{{ tools|tojson }}{{ eos_token }}", "<s>", "</s>");
  Dict tool;
  tool.set(Value::string("name"), Value::string("f"));
  const auto out = with_tools.render_values(Value::list({}), Value::list({Value::dict(tool)}), false);
  EXPECT_EQ(out.text(), "<s>[{\"name\": \"f\"}]</s>");
  EXPECT_EQ(out.untrusted(), (std::vector<ByteSpan>{{3, 18}}));
}

TEST(JinjaChatTemplate, ContextIsWhatHfPasses) {
  const JinjaChatTemplate chat(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token }}{{ eos_token }} "
      "{{ pad_token is defined }} {{ messages|length }}",
      {{"eos_token", "<|im_end|>"}});
  EXPECT_EQ(join_segment_text(chat.render({{"user", "a"}, {"assistant", "b"}}, true)),
            "True True True <|im_end|> False 2");
}

TEST(JinjaChatTemplate, NoneFieldsAreDropped) {
  const JinjaChatTemplate chat("{% for m in messages %}{{ m.content is defined }}{% endfor %}", "<s>", "</s>");
  Dict message;
  message.set(Value::string("role"), Value::string("assistant"));
  message.set(Value::string("content"), Value::none());
  EXPECT_EQ(chat.render_values(Value::list({Value::dict(message)}), Value::none(), false).text(), "False");
}

TEST(JinjaChatTemplate, RaiseExceptionIsTheError) {
  const JinjaChatTemplate chat(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}", "<s>", "</s>");
  try {
    chat.render({{"assistant", "x"}}, false);
    FAIL() << "expected raise_exception";
  } catch (const jinja::JinjaError& e) {
    EXPECT_EQ(e.reason(), "first must be user");
    EXPECT_EQ(e.line(), 1);
  } catch (...) {
    FAIL() << "expected a JinjaError";
  }
  EXPECT_THROW(chat.render({{"assistant", "x"}}, false), Error);
}

TEST(JinjaChatTemplate, RendersConcurrently) {
  const JinjaChatTemplate chat(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}{{ ns.n "
      "}}",
      "<s>", "</s>");
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        std::vector<ChatMessage> messages(static_cast<std::size_t>(t + 1), ChatMessage{"user", std::to_string(t)});
        results[static_cast<std::size_t>(t)] = join_segment_text(chat.render(messages, false));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(results[static_cast<std::size_t>(t)],
              std::string(static_cast<std::size_t>(t + 1), '0' + t) + std::to_string(t + 1));
  }
}

}  // namespace
}  // namespace serve8
