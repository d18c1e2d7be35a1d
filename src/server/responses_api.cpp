// OpenAI's Responses API, for text: POST /v1/responses with `input` (a string or a list of
// messages), `instructions`, `max_output_tokens`, `temperature`, `top_p`, `stream`; the reply is
// one assistant message, or its events when streamed (response.created ... output_text.delta ...
// response.completed). Tools, stored conversations and structured formats are refused by name.
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/generation.h"
#include "server/json_params.h"
#include "server/routes.h"

namespace serve8 {

namespace {

// The text of a message's content: a string, or input_text / output_text / text parts.
std::string content_text(const Json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw_invalid(param, "'{}' must be a string or a list of text parts", param);
  std::string text;
  for (const Json& part : content) {
    const auto type = part.is_object() ? part.find("type") : part.end();
    const bool is_text = type != part.end() && type->is_string() &&
                         (*type == "input_text" || *type == "output_text" || *type == "text");
    if (!is_text || !part.contains("text") || !part["text"].is_string())
      throw_invalid(param, "Only text content parts are supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> response_messages(const Json& body) {
  std::vector<ChatMessage> messages;
  if (auto instructions = read_string(body, "instructions", "instructions")) messages.push_back({"system", *instructions});
  const auto it = body.find("input");
  if (it == body.end() || it->is_null()) throw_invalid("input", "'input' is required");
  if (it->is_string()) {
    messages.push_back({"user", it->get<std::string>()});
  } else if (it->is_array() && !it->empty()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& m = (*it)[i];
      const std::string param = fmt::format("input[{}]", i);
      if (!m.is_object() || !m.contains("role")) throw_invalid(param, "'{}' must be a message with a role", param);
      if (auto type = read_string(m, "type", param + ".type"); type && *type != "message")
        throw_invalid(param + ".type", "Only message items are supported, got '{}'", *type);
      ChatMessage msg;
      msg.role = read_string(m, "role", param + ".role").value_or("");
      if (msg.role == "developer") msg.role = "system";
      msg.content = m.contains("content") ? content_text(m["content"], param + ".content") : "";
      messages.push_back(std::move(msg));
    }
  } else {
    throw_invalid("input", "'input' must be a string or a non-empty list of messages");
  }
  return messages;
}

struct Reply {
  std::string id, message_id, model;
  int64_t created = 0;
  Json echo;  // the request's settings, repeated in every response object
};

Json usage_of(const GenerationRun& r) {
  const TextOutput& o = r.output(0);
  const int64_t in = static_cast<int64_t>(r.input_ids(0).size()), out = o.completion_tokens();
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", o.cached_tokens()}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

Json message_item(const Reply& rp, const std::string& text, bool done) {
  Json content = Json::array();
  if (done) content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}});
  return {{"type", "message"},
          {"id", rp.message_id},
          {"status", done ? "completed" : "in_progress"},
          {"role", "assistant"},
          {"content", content}};
}

Json response_object(const Reply& rp, const GenerationRun* r) {
  Json obj = rp.echo;
  obj["id"] = rp.id;
  obj["object"] = "response";
  obj["created_at"] = rp.created;
  obj["model"] = rp.model;
  obj["error"] = nullptr;
  if (r == nullptr) {
    obj["status"] = "in_progress";
    obj["incomplete_details"] = nullptr;
    obj["output"] = Json::array();
    obj["usage"] = nullptr;
    return obj;
  }
  const TextOutput& o = r->output(0);
  const bool cut = o.reason() == FinishReason::kLength;
  obj["status"] = cut ? "incomplete" : "completed";
  obj["incomplete_details"] = cut ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
  obj["output"] = Json::array({message_item(rp, std::string(o.visible_text()), true)});
  obj["usage"] = usage_of(*r);
  return obj;
}

void handle_response(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const auto received = Clock::now();
  const Json body = parse_json_object(req.body);
  check_model(ctx, body);
  for (const char* key : {"previous_response_id", "conversation", "prompt"}) check_absent(body, key, key);
  if (const Json* tools = field(body, "tools"); tools && !(tools->is_array() && tools->empty()))
    throw_invalid("tools", "'tools' is not supported by serve8 yet");
  if (const Json* text = field(body, "text")) {
    const Json* format = text->is_object() ? field(*text, "format") : nullptr;
    if (!text->is_object() || (format && (!format->is_object() || format->value("type", Json()) != "text")))
      throw_invalid("text", "Only text.format {{\"type\": \"text\"}} is supported");
  }
  if (ctx.tokenizer() == nullptr || !ctx.tokenizer()->has_chat_template())
    throw_invalid("input", "This model has no chat template; use /v1/completions");
  const std::vector<ChatMessage> messages = response_messages(body);
  size_t bytes = 0;
  for (const ChatMessage& m : messages) bytes += m.content.size();
  ctx.check_prompt_bytes(bytes, "input");

  GenerationInput in;
  try {
    in.input_ids = ctx.tokenizer()->encode_chat(messages, true);
  } catch (const Error& e) {
    throw invalid_request(e.what(), "input");
  }
  in.params.max_new_tokens = std::numeric_limits<int32_t>::max();
  if (auto v = read_integer(body, "max_output_tokens", "max_output_tokens")) {
    in.params.max_new_tokens = to_int32(*v, "max_output_tokens");
    in.max_new_tokens_given = true;
  }
  if (auto v = read_number(body, "temperature", "temperature")) {
    if (*v > 2.0) throw_invalid("temperature", "'temperature' must be between 0 and 2, got {}", *v);
    in.params.temperature = static_cast<float>(*v);
  }
  if (auto v = read_number(body, "top_p", "top_p")) in.params.top_p = static_cast<float>(*v);
  const bool stream = read_bool(body, "stream", "stream").value_or(false);

  Reply rp;
  rp.id = "resp_" + ctx.new_request_id();
  rp.message_id = "msg_" + ctx.new_request_id();
  rp.model = ctx.options.served_model_name;
  rp.created = static_cast<int64_t>(std::time(nullptr));
  rp.echo = {{"instructions", body.value("instructions", Json())},
             {"max_output_tokens", body.value("max_output_tokens", Json())},
             {"temperature", in.params.temperature},
             {"top_p", in.params.top_p},
             {"tools", Json::array()},
             {"tool_choice", "auto"},
             {"parallel_tool_calls", false},
             {"text", {{"format", {{"type", "text"}}}}},
             {"metadata", body.value("metadata", Json::object())}};
  in.rid = rp.id;
  check_generation_input(ctx, in, "input", "max_output_tokens");
  std::vector<GenerationInput> inputs;
  inputs.push_back(std::move(in));
  auto run = std::make_shared<GenerationRun>(ctx, std::move(inputs), received);

  // Streamed: the events OpenAI sends for one text message, numbered.
  struct State {
    int64_t seq = 0;
    bool opened = false;
  };
  auto st = std::make_shared<State>();
  auto event = [st](const char* type, Json data) {
    data["type"] = type;
    data["sequence_number"] = st->seq++;
    return fmt::format("event: {}\ndata: {}\n\n", type, dump_json(data));
  };
  const Json where = {{"item_id", rp.message_id}, {"output_index", 0}, {"content_index", 0}};
  StreamFormat format;
  format.whole_events = true;
  format.on_change = [=](GenerationRun& r, const std::vector<size_t>&, std::vector<std::string>& out) {
    if (!st->opened) {
      st->opened = true;
      out.push_back(event("response.created", {{"response", response_object(rp, nullptr)}}));
      out.push_back(event("response.output_item.added", {{"output_index", 0}, {"item", message_item(rp, "", false)}}));
      Json part = where;
      part["part"] = {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
      out.push_back(event("response.content_part.added", part));
    }
    const std::string delta = r.output(0).take_delta();
    if (delta.empty()) return;
    Json d = where;
    d["delta"] = delta;
    d["logprobs"] = Json::array();
    out.push_back(event("response.output_text.delta", d));
  };
  format.on_end = [=](GenerationRun& r, std::vector<std::string>& out) {
    const std::string text(r.output(0).visible_text());
    Json done = where;
    done["text"] = text;
    done["logprobs"] = Json::array();
    out.push_back(event("response.output_text.done", done));
    Json part = where;
    part["part"] = {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
    out.push_back(event("response.content_part.done", part));
    out.push_back(event("response.output_item.done", {{"output_index", 0}, {"item", message_item(rp, text, true)}}));
    out.push_back(event("response.completed", {{"response", response_object(rp, &r)}}));
  };
  respond_with_run(res, run, stream ? &format : nullptr,
                   [rp](GenerationRun& r) { return dump_json(response_object(rp, &r)); });
}

}  // namespace

void register_responses_routes(Router& server, ServerContext& ctx) {
  server.Post("/v1/responses", [&ctx](const HttpRequest& req, HttpResponse& res) { handle_response(ctx, req, res); });
}

}  // namespace serve8
