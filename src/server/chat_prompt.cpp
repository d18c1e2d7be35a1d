#include "server/chat_prompt.h"

#include "core/error.h"
#include "server/api_error.h"
#include "server/jinja_json.h"
#include "server/server_context.h"
#include "tokenizer/jinja/value.h"

namespace serve8 {

namespace {

std::string required_string(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr) throw_invalid(param, "'{}' is required", param);
  if (!v->is_string()) throw_invalid(param, "'{}' must be a string", param);
  return v->get<std::string>();
}

// A content: a string, or a list of text parts (`part_types` name them) joined; null is "".
std::string content_text(const Json* content, const std::string& param,
                         std::initializer_list<std::string_view> part_types) {
  if (content == nullptr) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) throw_invalid(param, "'{}' must be a string or a list of text parts", param);
  std::string text;
  for (const Json& part : *content) {
    const Json* type = part.is_object() ? field(part, "type") : nullptr;
    const bool is_text = type != nullptr && type->is_string() &&
                         std::find(part_types.begin(), part_types.end(), type->get<std::string>()) != part_types.end();
    const Json* t = is_text ? field(part, "text") : nullptr;
    if (t == nullptr || !t->is_string()) throw_invalid(param, "Only text content parts are supported");
    text += t->get<std::string>();
  }
  return text;
}

// Arguments sent as a JSON string become the object it holds (templates print them with tojson);
// anything else stays as sent.
Json arguments_value(const Json& arguments) {
  if (!arguments.is_string()) return arguments;
  try {
    Json parsed = Json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) return parsed;
  } catch (const Json::exception&) {
  }
  return arguments;
}

Json tool_call_value(const Json& call, const std::string& param) {
  if (!call.is_object()) throw_invalid(param, "'{}' must be an object with 'id', 'type' and 'function'", param);
  Json out = call;
  if (const Json* id = field(call, "id"); id && !id->is_string()) throw_invalid(param + ".id", "'{}.id' must be a string", param);
  if (const Json* type = field(call, "type"); type && *type != "function")
    throw_invalid(param + ".type", "Only tool calls of type 'function' are supported");
  const Json* fn = field(call, "function");
  if (fn == nullptr || !fn->is_object())
    throw_invalid(param + ".function", "'{}.function' must be an object with 'name' and 'arguments'", param);
  required_string(*fn, "name", param + ".function.name");
  const Json* arguments = field(*fn, "arguments");
  if (arguments == nullptr || !(arguments->is_string() || arguments->is_object()))
    throw_invalid(param + ".function.arguments", "'{}.function.arguments' must be a JSON string", param);
  out["function"]["arguments"] = arguments_value(*arguments);
  return out;
}

}  // namespace

Json chat_messages(const Json& body) {
  const Json* list = field(body, "messages");
  if (list == nullptr || !list->is_array() || list->empty())
    throw_invalid("messages", "'messages' must be a non-empty list of messages");
  Json messages = Json::array();
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& m = (*list)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw_invalid(param, "'{}' must be an object with 'role' and 'content'", param);
    std::string role = field(m, "role") ? required_string(m, "role", param + ".role") : "";
    if (role.empty()) throw_invalid(param + ".role", "'{}.role' is required", param);
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    Json msg = m;
    msg["role"] = role;
    msg["content"] = content_text(field(m, "content"), param + ".content", {"text"});
    if (const Json* calls = field(m, "tool_calls")) {
      if (!calls->is_array()) throw_invalid(param + ".tool_calls", "'{}.tool_calls' must be a list", param);
      if (role != "assistant" && !calls->empty())
        throw_invalid(param + ".tool_calls", "Only assistant messages carry 'tool_calls', not '{}' ones", role);
      Json values = Json::array();
      for (size_t j = 0; j < calls->size(); ++j)
        values.push_back(tool_call_value((*calls)[j], fmt::format("{}.tool_calls[{}]", param, j)));
      if (values.empty()) {
        msg.erase("tool_calls");
      } else {
        msg["tool_calls"] = std::move(values);
      }
    }
    if (role == "tool") required_string(m, "tool_call_id", param + ".tool_call_id");
    messages.push_back(std::move(msg));
  }
  return messages;
}

Json response_input_messages(const Json& body) {
  Json messages = Json::array();
  if (const Json* instructions = field(body, "instructions")) {
    if (!instructions->is_string()) throw_invalid("instructions", "'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  const Json* input = field(body, "input");
  if (input == nullptr) throw_invalid("input", "'input' is required");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
    return messages;
  }
  if (!input->is_array() || input->empty())
    throw_invalid("input", "'input' must be a string or a non-empty list of items");
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string param = fmt::format("input[{}]", i);
    if (!item.is_object()) throw_invalid(param, "'{}' must be an object", param);
    const Json* type_field = field(item, "type");
    if (type_field && !type_field->is_string()) throw_invalid(param + ".type", "'{}.type' must be a string", param);
    const std::string type = type_field ? type_field->get<std::string>() : "message";
    if (type == "message") {
      std::string role = required_string(item, "role", param + ".role");
      if (role == "developer") role = "system";
      messages.push_back({{"role", role},
                          {"content", content_text(field(item, "content"), param + ".content",
                                                   {"input_text", "output_text", "text"})}});
    } else if (type == "function_call") {
      // Calls in a row are one assistant turn, as chat sends them.
      Json call = {{"id", required_string(item, "call_id", param + ".call_id")},
                    {"type", "function"},
                    {"function",
                     {{"name", required_string(item, "name", param + ".name")},
                      {"arguments", arguments_value(required_string(item, "arguments", param + ".arguments"))}}}};
      if (messages.empty() || messages.back()["role"] != "assistant" || !messages.back().contains("tool_calls"))
        messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array()}});
      messages.back()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const Json* output = field(item, "output");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", required_string(item, "call_id", param + ".call_id")},
                          {"content", content_text(output, param + ".output", {"input_text", "output_text", "text"})}});
    } else {
      throw_invalid(param + ".type",
                    "Only message, function_call and function_call_output items are supported, got '{}'", type);
    }
  }
  return messages;
}

std::vector<int32_t> encode_chat_prompt(const ServerContext& ctx, const Json& messages, const ToolsRequest& tools,
                                        const std::string& param) {
  const Tokenizer& tok = *ctx.tokenizer();
  size_t bytes = tools.tools.empty() ? 0 : tools.tools.dump().size();
  for (const Json& m : messages) {
    bytes += m["content"].get_ref<const std::string&>().size();
    if (m.contains("tool_calls")) bytes += m["tool_calls"].dump().size();
  }
  ctx.check_prompt_bytes(bytes, param);
  if (tok.jinja_chat_template() != nullptr) {
    const jinja::Value tool_values = tools.tools.empty() ? jinja::Value::none() : to_jinja_value(tools.tools);
    try {
      return tok.encode_chat_values(to_jinja_value(messages), tool_values, /*add_generation_prompt=*/true);
    } catch (const Error& e) {
      throw invalid_request(e.what(), param);
    }
  }
  // Llama-2's built-in format has role and content only: a tool turn would silently vanish.
  if (!tools.tools.empty())
    throw_invalid("tools", "This model's chat format (Llama-2's, built in) has no place for tools; give it a Jinja "
                           "template with --chat-template, or send tool_choice \"none\"");
  std::vector<ChatMessage> plain;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (m["role"] == "tool" || m.contains("tool_calls"))
      throw_invalid(fmt::format("{}[{}]", param, i),
                    "This model's chat format (Llama-2's, built in) has no tool calls or tool messages; give it a "
                    "Jinja template with --chat-template");
    plain.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  try {
    return tok.encode_chat(plain, /*add_generation_prompt=*/true);
  } catch (const Error& e) {
    throw invalid_request(e.what(), param);
  }
}

}  // namespace serve8
