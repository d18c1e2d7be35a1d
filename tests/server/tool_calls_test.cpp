// The tool-call parsers of server/tool_calls.h: each format's calls and content, several calls,
// malformed text staying content, and the streaming form matching the whole-text parse for every
// split of the text.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace serve8 {
namespace {

ToolCallSyntax syntax(ToolCallFormat format, std::vector<std::string> names = {}) {
  return ToolCallSyntax{format, std::move(names)};
}

// The stream fed in pieces of `step` bytes (0: the first `split` bytes, then the rest), gathered.
ParsedToolCalls stream(const ToolCallSyntax& s, std::string_view text, size_t split) {
  ToolCallStream st(s);
  ParsedToolCalls out;
  auto take = [&out](ParsedToolCalls part) {
    out.content += part.content;
    for (ToolCall& c : part.calls) out.calls.push_back(std::move(c));
  };
  take(st.push(text.substr(0, split)));
  take(st.push(text.substr(split)));
  take(st.finish());
  return out;
}

ParsedToolCalls stream_bytewise(const ToolCallSyntax& s, std::string_view text) {
  ToolCallStream st(s);
  ParsedToolCalls out;
  for (size_t i = 0; i <= text.size(); ++i) {
    ParsedToolCalls part = i < text.size() ? st.push(text.substr(i, 1)) : st.finish();
    out.content += part.content;
    for (ToolCall& c : part.calls) out.calls.push_back(std::move(c));
  }
  return out;
}

void expect_same(const ParsedToolCalls& a, const ParsedToolCalls& b, const std::string& where) {
  EXPECT_EQ(a.content, b.content) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments_json, b.calls[i].arguments_json) << where;
  }
}

// The whole-text parse, checked against the stream split at every byte and fed byte by byte.
ParsedToolCalls parse_checked(const ToolCallSyntax& s, const std::string& text) {
  const ParsedToolCalls whole = parse_tool_calls(s, text);
  for (size_t split = 0; split <= text.size(); ++split)
    expect_same(stream(s, text, split), whole, "split at " + std::to_string(split) + " of: " + text);
  expect_same(stream_bytewise(s, text), whole, "byte by byte: " + text);
  return whole;
}

TEST(ToolCallParserNames, NamesAndDetection) {
  EXPECT_EQ(tool_call_format_from_name("qwen25"), ToolCallFormat::kHermes);
  EXPECT_EQ(tool_call_format_from_name("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(tool_call_format_from_name("llama3"), ToolCallFormat::kLlama3);
  EXPECT_EQ(tool_call_format_from_name("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(tool_call_format_from_name("deepseek"), std::nullopt);
  EXPECT_NE(tool_call_parser_names().find("qwen25"), std::string::npos);
  EXPECT_EQ(detect_tool_call_format("{{- '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS] ' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{- '<|python_tag|>' }}"), ToolCallFormat::kLlama3);
  EXPECT_EQ(detect_tool_call_format("{% for m in messages %}{{ m.content }}{% endfor %}"), ToolCallFormat::kNone);
}

TEST(HermesToolCalls, OneCallAfterText) {
  const ParsedToolCalls p = parse_checked(
      syntax(ToolCallFormat::kHermes),
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n"
      "</tool_call>");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  // Keys stay in the model's order.
  EXPECT_EQ(p.calls[0].arguments_json, R"({"city":"Paris","unit":"c"})");
}

TEST(HermesToolCalls, SeveralCallsNoContent) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kHermes),
                                          "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                                          "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, \"}\"]}}\n</tool_call>\n");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments_json, "{}");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments_json, R"({"x":[1,"}"]})");
}

TEST(HermesToolCalls, PlainTextIsContent) {
  const std::string text = "No tools needed: 1 < 2, and <tool is not a tag.  \n";
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kHermes), text);
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty());
}

TEST(HermesToolCalls, MalformedBlocksStayContent) {
  for (const std::string text : {
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {}\n</tool_call>",           // unbalanced
           "<tool_call>\nnot json\n</tool_call> tail",                               // not JSON
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                         // no name
           "<tool_call>\n{\"name\": \"a\", \"arguments\": [1]}\n</tool_call>",       // arguments not an object
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1e999}}\n</tool_call>",  // out of range
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {}} trailing\n</tool_call>",
           "text <tool_call>\n{\"name\": \"a\", \"argu",  // cut off
       }) {
    const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kHermes), text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
}

TEST(HermesToolCalls, GoodCallBesideBadOne) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kHermes),
                                          "<tool_call>oops</tool_call>\n<tool_call>{\"name\": \"a\", \"arguments\": "
                                          "{\"q\": \"<tool_call>\"}}</tool_call> done");
  EXPECT_EQ(p.content, "<tool_call>oops</tool_call>done");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments_json, R"({"q":"<tool_call>"})");
}

TEST(HermesToolCalls, UnclosedLastBlockCounts) {
  const ParsedToolCalls p =
      parse_checked(syntax(ToolCallFormat::kHermes), "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"n\": 1}}\n");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments_json, R"({"n":1})");
  EXPECT_EQ(p.content, "");
}

TEST(HermesToolCalls, UndeclaredNameStaysContent) {
  const std::string text = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kHermes, {"get_weather"}), text);
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(parse_checked(syntax(ToolCallFormat::kHermes, {"rm_rf"}), text).calls.size(), 1u);
}

TEST(HermesToolCalls, ArgumentsAsAJsonString) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kHermes),
                                          "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 2}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments_json, R"({"k":2})");
}

TEST(Llama3ToolCalls, TaggedCalls) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kLlama3),
                                          "Checking.<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; "
                                          "{\"name\": \"b\", \"parameters\": {}}");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments_json, R"({"x":1})");
  EXPECT_EQ(p.calls[1].name, "b");
}

TEST(Llama3ToolCalls, BareJsonReply) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kLlama3),
                                          "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments_json, R"({"city":"Oslo"})");
}

TEST(Llama3ToolCalls, TextAfterTheCalls) {
  const ParsedToolCalls p =
      parse_checked(syntax(ToolCallFormat::kLlama3), "{\"name\": \"a\", \"parameters\": {}}; and more text");
  EXPECT_EQ(p.content, "and more text");
  ASSERT_EQ(p.calls.size(), 1u);
}

TEST(Llama3ToolCalls, MalformedStaysContent) {
  for (const std::string text : {
           "{\"answer\": 42}",                                    // JSON, not a call
           "{\"name\": \"a\", \"parameters\": {\"x\": ",          // cut off
           "Hello <|python_tag|> not a call",                     // tag, no JSON
           "Hello <|python_tag|>",                                // tag at the end
           "<|python_tag|>{\"name\": \"a\", \"parameters\": 3}",  // bad parameters
           "Just text, no calls.\n",
       }) {
    const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kLlama3), text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
}

TEST(Llama3ToolCalls, GoodCallThenBadOne) {
  const ParsedToolCalls p =
      parse_checked(syntax(ToolCallFormat::kLlama3), "<|python_tag|>{\"name\": \"a\", \"parameters\": {}};{\"oops\": 1}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "{\"oops\": 1}");
}

TEST(MistralToolCalls, ListOfCalls) {
  const ParsedToolCalls p = parse_checked(
      syntax(ToolCallFormat::kMistral),
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"s\": \"[x]\"}}, {\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments_json, R"({"s":"[x]"})");
  EXPECT_EQ(p.calls[1].name, "b");
}

TEST(MistralToolCalls, TextBeforeAndNewerFormat) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kMistral),
                                          "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}"
                                          "[TOOL_CALLS]get_time[ARGS]{}");
  EXPECT_EQ(p.content, "Sure.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments_json, R"({"city":"Rome"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
}

TEST(MistralToolCalls, MalformedStaysContent) {
  for (const std::string text : {
           "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"nope\": 1}]",  // one bad item spoils the list
           "[TOOL_CALLS] [{\"name\": \"a\", \"argu",                             // cut off
           "[TOOL_CALLS] []",
           "[TOOL_CALLS] hello there",
           "[TOOL_CALLS]",
           "The [TOOL list] is [1, 2]",
       }) {
    const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kMistral), text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
}

TEST(JsonArrayToolCalls, RequiredOutput) {
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kJsonArray, {"a", "b"}),
                                          "[{\"name\": \"a\", \"parameters\": {\"x\": 1}}, {\"name\": \"b\", "
                                          "\"parameters\": {\"y\": \"z\"}}]");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments_json, R"({"x":1})");
  EXPECT_EQ(p.calls[1].arguments_json, R"({"y":"z"})");
}

TEST(JsonArrayToolCalls, MalformedStaysContent) {
  for (const std::string text : {"[]", "[{\"name\": \"c\", \"parameters\": {}}]", "[{\"name\": \"a\", ",
                                 "I will not call a tool.", ""}) {
    const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kJsonArray, {"a"}), text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
}

TEST(NoToolCallFormat, EverythingIsContent) {
  const std::string text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>";
  const ParsedToolCalls p = parse_checked(syntax(ToolCallFormat::kNone), text);
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty());
}

TEST(ToolCallStream, HoldsBackOnlyWhatMayBeMarkup) {
  ToolCallStream st(syntax(ToolCallFormat::kHermes));
  EXPECT_EQ(st.push("Hello").content, "Hello");
  EXPECT_EQ(st.push(" world  <tool").content, " world");  // the spaces and "<tool" wait
  ParsedToolCalls p = st.push("_call>{\"name\": \"a\", \"arguments\": {}}");
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(p.calls.empty());
  p = st.push("</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "a");
  p = st.finish();
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(p.calls.empty());
}

}  // namespace
}  // namespace serve8
