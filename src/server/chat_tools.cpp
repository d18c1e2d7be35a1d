#include "server/chat_tools.h"

#include <algorithm>
#include <cctype>

#include "server/api_error.h"
#include "server/json_params.h"

namespace serve8 {

namespace {

constexpr size_t kMaxToolNameBytes = 64;  // OpenAI's limit

std::string string_field(const Json& obj, const char* key, const std::string& param, bool required) {
  const Json* v = field(obj, key);
  if (v == nullptr) {
    if (required) throw_invalid(param, "'{}' is required", param);
    return "";
  }
  if (!v->is_string()) throw_invalid(param, "'{}' must be a string", param);
  return v->get<std::string>();
}

// OpenAI's rule for function names (letters, digits, '_' and '-', at most 64), with '.' as well,
// which MCP tool names use.
void check_tool_name(const std::string& name, const std::string& param) {
  const bool ok = !name.empty() && name.size() <= kMaxToolNameBytes &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
                  });
  if (!ok)
    throw_invalid(param, "'{}' must be 1 to {} letters, digits, '_', '-' or '.', got '{}'", param, kMaxToolNameBytes,
                  name);
}

// One function: its name, schema and description checked, added to `out`. `fn` holds name,
// description, parameters and strict (chat's "function" object, or the Responses API's tool).
void add_function(const Json& fn, const std::string& param, ToolsRequest& out) {
  const std::string name = string_field(fn, "name", param + ".name", true);
  check_tool_name(name, param + ".name");
  if (std::find(out.names.begin(), out.names.end(), name) != out.names.end())
    throw_invalid(param + ".name", "Two tools are named '{}'", name);
  string_field(fn, "description", param + ".description", false);
  if (const Json* strict = field(fn, "strict"); strict && !strict->is_boolean())
    throw_invalid(param + ".strict", "'{}.strict' must be a boolean", param);
  Json schema = Json{{"type", "object"}, {"properties", Json::object()}};
  if (const Json* p = field(fn, "parameters")) {
    if (!p->is_object()) throw_invalid(param + ".parameters", "'{}.parameters' must be a JSON schema object", param);
    // A call's arguments are an object: a schema that says nothing ({}) gets that much.
    if (!p->empty()) schema = *p;
  }
  out.names.push_back(name);
  out.parameters.push_back(std::move(schema));
}

const Json* tools_list(const Json& body) {
  const Json* tools = field(body, "tools");
  if (tools == nullptr) return nullptr;
  if (!tools->is_array()) throw_invalid("tools", "'tools' must be a list of function tools");
  return tools->empty() ? nullptr : tools;
}

void check_function_type(const Json& tool, const std::string& param) {
  if (!tool.is_object()) throw_invalid(param, "'{}' must be an object", param);
  const Json* type = field(tool, "type");
  if (type == nullptr || !type->is_string() || *type != "function")
    throw_invalid(param + ".type", "Only tools of type 'function' are supported");
}

// tool_choice as a string, or the name of a named function (`named_of` reads it from the object).
void read_choice(const Json& body, const std::function<std::string(const Json&)>& named_of, ToolsRequest& out) {
  const Json* choice = field(body, "tool_choice");
  const bool has_tools = !out.names.empty();
  if (choice == nullptr) {
    out.choice = has_tools ? ToolsRequest::Choice::kAuto : ToolsRequest::Choice::kNone;
  } else if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      out.choice = ToolsRequest::Choice::kNone;
    } else if (c == "auto" || c == "required") {
      if (!has_tools) throw_invalid("tool_choice", "'tool_choice' \"{}\" needs 'tools'", c);
      out.choice = c == "auto" ? ToolsRequest::Choice::kAuto : ToolsRequest::Choice::kRequired;
    } else {
      throw_invalid("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function, got \"{}\"", c);
    }
  } else if (choice->is_object()) {
    const Json* type = field(*choice, "type");
    if (type == nullptr || !type->is_string() || *type != "function")
      throw_invalid("tool_choice.type", "'tool_choice' names a function: its 'type' must be \"function\"");
    out.forced = named_of(*choice);
    if (std::find(out.names.begin(), out.names.end(), out.forced) == out.names.end())
      throw_invalid("tool_choice", "'tool_choice' names the function '{}', which is not in 'tools'", out.forced);
    out.choice = ToolsRequest::Choice::kNamed;
  } else {
    throw_invalid("tool_choice", "'tool_choice' must be a string or an object");
  }
  if (const Json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw_invalid("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    out.parallel = p->get<bool>();
  }
}

void finish_request(ToolsRequest& out, ToolCallFormat auto_format) {
  switch (out.choice) {
    case ToolsRequest::Choice::kNone:
      out.tools = Json::array();  // SGLang's choice: a model told of no tools calls none
      out.format = ToolCallFormat::kNone;
      break;
    case ToolsRequest::Choice::kAuto:
      out.format = auto_format;
      break;
    case ToolsRequest::Choice::kRequired:
      out.format = ToolCallFormat::kJsonArray;
      break;
    case ToolsRequest::Choice::kNamed:
      out.format = ToolCallFormat::kNone;
      break;
  }
}

}  // namespace

ToolsRequest read_chat_tools(const Json& body, ToolCallFormat auto_format) {
  ToolsRequest out;
  if (const Json* tools = tools_list(body)) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = fmt::format("tools[{}]", i);
      const Json& tool = (*tools)[i];
      check_function_type(tool, param);
      const Json* fn = field(tool, "function");
      if (fn == nullptr || !fn->is_object())
        throw_invalid(param + ".function", "'{}.function' must be an object with the function's name", param);
      add_function(*fn, param + ".function", out);
      out.tools.push_back(tool);
    }
  }
  read_choice(
      body,
      [](const Json& choice) {
        const Json* fn = field(choice, "function");
        if (fn == nullptr || !fn->is_object())
          throw_invalid("tool_choice.function", "'tool_choice.function' must be an object with the function's name");
        return string_field(*fn, "name", "tool_choice.function.name", true);
      },
      out);
  finish_request(out, auto_format);
  return out;
}

ToolsRequest read_response_tools(const Json& body, ToolCallFormat auto_format) {
  ToolsRequest out;
  if (const Json* tools = tools_list(body)) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = fmt::format("tools[{}]", i);
      const Json& tool = (*tools)[i];
      check_function_type(tool, param);
      add_function(tool, param, out);
      // Chat templates know chat's shape.
      Json fn = Json::object();
      for (const char* key : {"name", "description", "parameters"})
        if (const Json* v = field(tool, key)) fn[key] = *v;
      out.tools.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    }
  }
  read_choice(
      body, [](const Json& choice) { return string_field(choice, "name", "tool_choice.name", true); }, out);
  finish_request(out, auto_format);
  return out;
}

void apply_tool_choice(const ToolsRequest& tools, bool skip_special_tokens_given, SamplingParams& params) {
  if (tools.forcing()) {
    if (!params.grammar.empty())
      throw_invalid("tool_choice", "'tool_choice' \"{}\" constrains the output, and so does response_format: send one",
                    tools.choice == ToolsRequest::Choice::kNamed ? tools.forced : "required");
    Json schema;
    if (tools.choice == ToolsRequest::Choice::kNamed) {
      const size_t i = static_cast<size_t>(std::find(tools.names.begin(), tools.names.end(), tools.forced) -
                                           tools.names.begin());
      schema = tools.parameters[i];
    } else {
      // SGLang's shape: a list of {"name", "parameters"} objects, each one of the tools.
      Json any_of = Json::array();
      for (size_t i = 0; i < tools.names.size(); ++i)
        any_of.push_back({{"type", "object"},
                          {"properties", {{"name", {{"type", "string"}, {"const", tools.names[i]}}},
                                          {"parameters", tools.parameters[i]}}},
                          {"required", {"name", "parameters"}},
                          {"additionalProperties", false}});
      schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
      if (!tools.parallel) schema["maxItems"] = 1;
    }
    params.grammar.kind = GrammarSpec::Kind::kJsonSchema;
    params.grammar.text = schema.dump();
    params.grammar.source = "tools";  // a schema that does not compile came from a tool's parameters
  }
  // Llama 3's <|python_tag|> and Mistral's [TOOL_CALLS] are special tokens, which the text drops by
  // default; the parser needs them (the markers themselves never reach the client).
  const bool special_markup = tools.format == ToolCallFormat::kLlama3 || tools.format == ToolCallFormat::kMistral;
  if (special_markup && !skip_special_tokens_given) params.skip_special_tokens = false;
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

ToolCallOutput::ToolCallOutput(const ToolsRequest& tools, std::function<std::string()> new_id)
    : choice_(tools.choice),
      forced_(tools.forced),
      parallel_(tools.parallel),
      syntax_{tools.format, tools.names},
      stream_(syntax_),
      new_id_(std::move(new_id)) {}

ParsedToolCalls ToolCallOutput::parse(std::string_view text) {
  ParsedToolCalls out;
  if (choice_ == ToolsRequest::Choice::kNamed) {
    // The whole output is the arguments (the grammar made it the schema's object).
    const size_t begin = text.find_first_not_of(" \t\r\n");
    const size_t end = text.find_last_not_of(" \t\r\n");
    const std::string arguments = begin == std::string_view::npos ? "" : std::string(text.substr(begin, end + 1 - begin));
    out.calls.push_back({new_id_(), forced_, arguments});
  } else {
    out = parse_tool_calls(syntax_, text);
    // A forced list cut short by max_tokens leaves a fragment of JSON, never prose: no content.
    if (choice_ == ToolsRequest::Choice::kRequired) out.content.clear();
    if (!parallel_ && out.calls.size() > 1) out.calls.resize(1);
    for (ToolCall& call : out.calls) call.id = new_id_();
  }
  calls_ = out.calls;
  return out;
}

ToolOutputDelta ToolCallOutput::take(ParsedToolCalls parsed) {
  ToolOutputDelta out;
  if (choice_ != ToolsRequest::Choice::kRequired) out.content = std::move(parsed.content);
  for (ToolCall& call : parsed.calls) {
    if (!parallel_ && !calls_.empty()) break;
    call.id = new_id_();
    out.calls.push_back({calls_.size(), true, call.id, call.name, call.arguments_json});
    calls_.push_back(std::move(call));
  }
  return out;
}

// The named function's arguments as they stream: the output less surrounding whitespace
// (whitespace is held until text follows it, as it may be trailing).
ToolOutputDelta ToolCallOutput::named(std::string_view delta, bool final) {
  ToolOutputDelta out;
  std::string arguments;
  for (char c : delta) {
    if (is_space(c)) {
      if (arguments_begun_) pending_space_ += c;
      continue;
    }
    arguments_begun_ = true;
    arguments += pending_space_;
    pending_space_.clear();
    arguments += c;
  }
  if (final) pending_space_.clear();
  if (calls_.empty()) {
    calls_.push_back({new_id_(), forced_, ""});
    out.calls.push_back({0, true, calls_[0].id, forced_, ""});
  }
  if (!arguments.empty()) {
    calls_[0].arguments_json += arguments;
    if (out.calls.empty()) out.calls.push_back({0, false, "", "", ""});
    out.calls.back().arguments += arguments;
  }
  return out;
}

ToolOutputDelta ToolCallOutput::push(std::string_view delta) {
  if (choice_ == ToolsRequest::Choice::kNamed) return named(delta, false);
  return take(stream_.push(delta));
}

ToolOutputDelta ToolCallOutput::finish() {
  if (choice_ == ToolsRequest::Choice::kNamed) return named("", true);
  return take(stream_.finish());
}

Json tool_calls_json(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& call : calls)
    out.push_back({{"id", call.id},
                   {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", call.arguments_json}}}});
  return out;
}

Json tool_call_deltas_json(const std::vector<ToolCallDelta>& calls) {
  Json out = Json::array();
  for (const ToolCallDelta& d : calls) {
    // OpenAI's shape: the first piece of a call has its id, type and name; later ones only add
    // to the arguments.
    Json item = {{"index", d.index}};
    if (d.first) {
      item["id"] = d.id;
      item["type"] = "function";
      item["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
      item["function"] = {{"arguments", d.arguments}};
    }
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace serve8
