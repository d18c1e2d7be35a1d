// OpenAI's function tools on /v1/chat/completions and /v1/responses: the request's `tools` and
// `tool_choice` (a 400 naming the field for a bad shape), the JSON schema a forcing tool_choice
// constrains the output to (as SGLang builds it), and each choice's output turned into tool calls,
// whole or streamed.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "server/json_params.h"
#include "server/tool_calls.h"

namespace serve8 {

struct ToolsRequest {
  enum class Choice {
    kNone,      // no tools, or tool_choice "none": the output is text
    kAuto,      // the model may call: its markup is parsed (ServerContext::tool_call_format)
    kRequired,  // at least one call: the output is a JSON array of {"name", "parameters"}
    kNamed,     // one call of `forced`: the output is its arguments
  };
  Choice choice = Choice::kNone;
  // The chat-shape tool dicts for the chat template ({"type": "function", "function": {...}}),
  // as the request gave them; empty with tool_choice "none" (SGLang's choice).
  Json tools = Json::array();
  std::vector<std::string> names;
  std::vector<Json> parameters;  // names[i]'s JSON schema
  std::string forced;
  bool parallel = true;  // parallel_tool_calls: false keeps one call
  ToolCallFormat format = ToolCallFormat::kNone;

  bool forcing() const { return choice == Choice::kRequired || choice == Choice::kNamed; }
};

// Chat's `tools` ([{"type": "function", "function": {"name", "description", "parameters"}}]),
// `tool_choice` and `parallel_tool_calls`. auto_format: how the model writes calls.
ToolsRequest read_chat_tools(const Json& body, ToolCallFormat auto_format);
// The Responses API's flat tools ([{"type": "function", "name", "description", "parameters"}])
// and tool_choice ({"type": "function", "name"} for a named one).
ToolsRequest read_response_tools(const Json& body, ToolCallFormat auto_format);

// What the tool choice asks of decoding: the JSON schema a forcing choice constrains the output
// to (a 400 when the request already constrains it, as response_format does), and the special
// tokens kept in the text when the model's markup is made of them (Llama 3's <|python_tag|>).
void apply_tool_choice(const ToolsRequest& tools, bool skip_special_tokens_given, SamplingParams& params);

// A piece of a call for a stream: the first piece of call `index` carries its id and name.
struct ToolCallDelta {
  size_t index = 0;
  bool first = false;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ToolOutputDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

// One choice's output as content and tool calls. new_id names each call ("call_<hex>").
class ToolCallOutput {
 public:
  ToolCallOutput(const ToolsRequest& tools, std::function<std::string()> new_id);

  // The whole text at once.
  ParsedToolCalls parse(std::string_view text);
  // Streamed: the text as it comes, then finish(); content is returned only once it is known not
  // to be markup. calls(): every call returned so far, arguments whole.
  ToolOutputDelta push(std::string_view delta);
  ToolOutputDelta finish();
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  ToolOutputDelta take(ParsedToolCalls parsed);
  ToolOutputDelta named(std::string_view delta, bool final);

  ToolsRequest::Choice choice_;
  std::string forced_;
  bool parallel_;
  ToolCallSyntax syntax_;
  ToolCallStream stream_;
  std::function<std::string()> new_id_;
  std::vector<ToolCall> calls_;
  std::string pending_space_;  // named: whitespace that is either inside the arguments or after them
  bool arguments_begun_ = false;
};

// OpenAI's JSON for tool calls: a message's "tool_calls", and a chunk delta's.
Json tool_calls_json(const std::vector<ToolCall>& calls);
Json tool_call_deltas_json(const std::vector<ToolCallDelta>& calls);

}  // namespace serve8
