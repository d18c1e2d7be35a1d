// Tool calls in generated text: the markup tool-calling models write them in (Hermes / Qwen's
// <tool_call> blocks, Llama 3's JSON after an optional <|python_tag|>, Mistral's [TOOL_CALLS]
// lists) and the JSON array tool_choice "required" forces, parsed into calls and the text outside
// them. Pure functions over text, whole or streamed; text that does not parse stays content.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace serve8 {

enum class ToolCallFormat {
  kNone,       // no parsing: the text is all content
  kHermes,     // <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>, repeated (Qwen 2.5/3, Hermes)
  kLlama3,     // [<|python_tag|>]{"name": .., "parameters": {..}}; ... (Llama 3.1-3.3)
  kMistral,    // [TOOL_CALLS] [{"name": .., "arguments": {..}}, ...], or [TOOL_CALLS]name[ARGS]{..}
  kJsonArray,  // [{"name": .., "parameters": {..}}, ...]: what tool_choice "required" constrains to
};

// --tool-call-parser's names (SGLang's and vLLM's): "qwen25", "qwen", "qwen3", "hermes" -> kHermes,
// "llama3", "llama3_json" -> kLlama3, "mistral" -> kMistral; nullopt for any other.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
// The accepted names, for error messages.
std::string tool_call_parser_names();
std::string_view tool_call_format_name(ToolCallFormat format);
// The format a chat template's source writes tool calls in, when its text shows one clearly
// ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"); kNone otherwise.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

struct ToolCall {
  std::string id;              // "" from the parsers: the server names calls
  std::string name;
  std::string arguments_json;  // a JSON object, compact, keys in the model's order
};

struct ParsedToolCalls {
  // The text outside the calls' markup; whitespace next to a call counts as markup.
  std::string content;
  std::vector<ToolCall> calls;
};

struct ToolCallSyntax {
  ToolCallFormat format = ToolCallFormat::kNone;
  // The declared tools: a call naming another one is left as text. Empty: any name.
  std::vector<std::string> names;
};

ParsedToolCalls parse_tool_calls(const ToolCallSyntax& syntax, std::string_view text);

// The streaming form: push() the text as it is generated, then finish(). What they return,
// concatenated (content) and appended (calls), is exactly parse_tool_calls of the whole text:
// text that may still turn out to be markup (a partial "<tool_c", whitespace that may precede a
// call, an unfinished call) is held back until it is decided. A call is returned once complete.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallSyntax syntax) : syntax_(std::move(syntax)) {}

  ParsedToolCalls push(std::string_view delta);
  ParsedToolCalls finish();

 private:
  ParsedToolCalls advance(bool final);

  ToolCallSyntax syntax_;
  std::string text_;
  size_t content_sent_ = 0;  // bytes of content returned so far
  size_t calls_sent_ = 0;
};

}  // namespace serve8
