// OpenAI's Responses API: POST /v1/responses with `input` (a string, or message, function_call
// and function_call_output items), `instructions`, `tools`, `tool_choice`, `max_output_tokens`,
// `temperature`, `top_p`, `stream`; the reply is an assistant message and function_call items, or
// their events when streamed (response.created ... output_text.delta ...
// function_call_arguments.delta ... response.completed). Stored conversations and structured
// formats are refused by name.
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/json_params.h"
#include "server/routes.h"

namespace serve8 {

namespace {

struct Reply {
  std::string id, message_id, model;
  int64_t created = 0;
  Json echo;  // the request's settings, repeated in every response object
  std::shared_ptr<const ToolsRequest> tools;  // null: the output is text
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

Json function_call_item(const std::string& item_id, const ToolCall& call, bool done) {
  return {{"type", "function_call"},
          {"id", item_id},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", done ? call.arguments_json : ""},
          {"status", done ? "completed" : "in_progress"}};
}

std::string new_call_id(ServerContext& ctx) { return "call_" + ctx.new_request_id().substr(0, 24); }
std::string new_item_id(ServerContext& ctx) { return "fc_" + ctx.new_request_id().substr(0, 24); }

// The output items of a whole text: the message (unless calls are all there is), then the calls.
Json output_items(ServerContext& ctx, const Reply& rp, const std::string& text) {
  if (!rp.tools) return Json::array({message_item(rp, text, true)});
  const ParsedToolCalls parsed = ToolCallOutput(*rp.tools, [&ctx] { return new_call_id(ctx); }).parse(text);
  Json items = Json::array();
  if (parsed.calls.empty() || !parsed.content.empty()) items.push_back(message_item(rp, parsed.content, true));
  for (const ToolCall& call : parsed.calls) items.push_back(function_call_item(new_item_id(ctx), call, true));
  return items;
}

// `output`: the items once finished (r != null).
Json response_object(const Reply& rp, const GenerationRun* r, Json output = Json::array()) {
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
  obj["output"] = std::move(output);
  obj["usage"] = usage_of(*r);
  return obj;
}

// A streamed response's events, numbered, for one message and any function calls, each item
// opened when its first text arrives (the message at once when there are no tools).
class ResponseEvents {
 public:
  ResponseEvents(ServerContext& ctx, Reply rp)
      : ctx_(ctx), rp_(std::move(rp)) {
    if (rp_.tools) tools_ = std::make_unique<ToolCallOutput>(*rp_.tools, [this] { return new_call_id(ctx_); });
  }

  void change(GenerationRun& r, std::vector<std::string>& out) {
    if (!created_) {
      created_ = true;
      out.push_back(event("response.created", {{"response", response_object(rp_, nullptr)}}));
      if (!tools_) open_message(out);
    }
    const std::string delta = r.output(0).take_delta();
    if (tools_) {
      add(tools_->push(delta), out);
    } else {
      add_text(delta, out);
    }
  }

  void end(GenerationRun& r, std::vector<std::string>& out) {
    if (tools_) add(tools_->finish(), out);
    if (message_index_ < 0 && calls_.empty()) open_message(out);
    // The items' done events, in output order.
    Json items = Json::array();
    for (int index = 0; index < next_index_; ++index) {
      if (index == message_index_) {
        Json done = where();
        done["text"] = text_;
        done["logprobs"] = Json::array();
        out.push_back(event("response.output_text.done", done));
        Json part = where();
        part["part"] = {{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}};
        out.push_back(event("response.content_part.done", part));
        items.push_back(message_item(rp_, text_, true));
      } else {
        const auto& [item_id, k] = calls_.at(static_cast<size_t>(index));
        const ToolCall& call = tools_->calls()[k];
        out.push_back(event("response.function_call_arguments.done",
                            {{"item_id", item_id}, {"output_index", index}, {"arguments", call.arguments_json}}));
        items.push_back(function_call_item(item_id, call, true));
      }
      out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", items.back()}}));
    }
    out.push_back(event("response.completed", {{"response", response_object(rp_, &r, items)}}));
  }

 private:
  std::string event(const char* type, Json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return fmt::format("event: {}\ndata: {}\n\n", type, dump_json(data));
  }

  Json where() const { return {{"item_id", rp_.message_id}, {"output_index", message_index_}, {"content_index", 0}}; }

  void open_message(std::vector<std::string>& out) {
    message_index_ = next_index_++;
    out.push_back(event("response.output_item.added", {{"output_index", message_index_}, {"item", message_item(rp_, "", false)}}));
    Json part = where();
    part["part"] = {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
    out.push_back(event("response.content_part.added", part));
  }

  void add_text(const std::string& delta, std::vector<std::string>& out) {
    if (delta.empty()) return;
    if (message_index_ < 0) open_message(out);
    text_ += delta;
    Json d = where();
    d["delta"] = delta;
    d["logprobs"] = Json::array();
    out.push_back(event("response.output_text.delta", d));
  }

  void add(const ToolOutputDelta& delta, std::vector<std::string>& out) {
    add_text(delta.content, out);
    for (const ToolCallDelta& d : delta.calls) {
      if (d.first) {
        calls_[next_index_] = {new_item_id(ctx_), d.index};
        by_call_.push_back(next_index_);
        const auto& [item_id, k] = calls_[next_index_];
        out.push_back(event("response.output_item.added",
                            {{"output_index", next_index_}, {"item", function_call_item(item_id, tools_->calls()[k], false)}}));
        ++next_index_;
      }
      if (d.arguments.empty()) continue;
      const int index = by_call_.at(d.index);
      out.push_back(event("response.function_call_arguments.delta",
                          {{"item_id", calls_.at(static_cast<size_t>(index)).first}, {"output_index", index},
                           {"delta", d.arguments}}));
    }
  }

  ServerContext& ctx_;
  Reply rp_;
  std::unique_ptr<ToolCallOutput> tools_;
  int64_t seq_ = 0;
  bool created_ = false;
  int next_index_ = 0;      // the next item's output_index
  int message_index_ = -1;  // -1 until the message is opened
  std::string text_;
  std::map<size_t, std::pair<std::string, size_t>> calls_;  // output_index -> item id, call number
  std::vector<int> by_call_;                                 // call number -> output_index
};

void handle_response(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const auto received = Clock::now();
  const Json body = parse_json_object(req.body);
  check_model(ctx, body);
  for (const char* key : {"previous_response_id", "conversation", "prompt"}) check_absent(body, key, key);
  // text.format: text, json_object or json_schema in the Responses API's flat form
  // ({type, name, schema, strict}); chat's response_format reads it once nested.
  Json text_format = {{"type", "text"}};
  if (const Json* text = field(body, "text")) {
    if (!text->is_object()) throw_invalid("text", "'text' must be an object");
    if (const Json* format = field(*text, "format")) {
      if (!format->is_object()) throw_invalid("text.format", "'text.format' must be an object");
      text_format = *format;
    }
  }
  if (ctx.tokenizer() == nullptr || !ctx.tokenizer()->has_chat_template())
    throw_invalid("input", "This model has no chat template; use /v1/completions");
  const Json messages = response_input_messages(body);
  auto tools = std::make_shared<const ToolsRequest>(read_response_tools(body, ctx.tool_call_format));

  GenerationInput in;
  in.input_ids = encode_chat_prompt(ctx, messages, *tools, "input");
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
  {
    Json rf = text_format;
    if (text_format.value("type", Json()) == "json_schema")
      rf = {{"type", "json_schema"}, {"json_schema", {{"schema", text_format.value("schema", Json::object())}}}};
    read_response_format(rf, in.params);
    if (!in.params.grammar.empty()) in.params.grammar.source = "text.format";
  }
  const bool stream = read_bool(body, "stream", "stream").value_or(false);

  Reply rp;
  rp.id = "resp_" + ctx.new_request_id();
  rp.message_id = "msg_" + ctx.new_request_id();
  rp.model = ctx.options.served_model_name;
  rp.created = static_cast<int64_t>(std::time(nullptr));
  const Json* tool_choice = field(body, "tool_choice");
  rp.echo = {{"instructions", body.value("instructions", Json())},
             {"max_output_tokens", body.value("max_output_tokens", Json())},
             {"temperature", in.params.temperature},
             {"top_p", in.params.top_p},
             {"tools", body.contains("tools") && body["tools"].is_array() ? body["tools"] : Json::array()},
             {"tool_choice", tool_choice ? *tool_choice : Json("auto")},
             {"parallel_tool_calls", tools->parallel},
             {"text", {{"format", text_format}}},
             {"metadata", body.value("metadata", Json::object())}};
  if (tools->choice != ToolsRequest::Choice::kNone) {
    apply_tool_choice(*tools, /*skip_special_tokens_given=*/false, in.params);
    rp.tools = tools;
  }
  in.rid = rp.id;
  check_generation_input(ctx, in, "input", "max_output_tokens");
  std::vector<GenerationInput> inputs;
  inputs.push_back(std::move(in));
  auto run = std::make_shared<GenerationRun>(ctx, std::move(inputs), received);

  auto events = std::make_shared<ResponseEvents>(ctx, rp);
  StreamFormat format;
  format.whole_events = true;
  format.on_change = [events](GenerationRun& r, const std::vector<size_t>&, std::vector<std::string>& out) {
    events->change(r, out);
  };
  format.on_end = [events](GenerationRun& r, std::vector<std::string>& out) { events->end(r, out); };
  respond_with_run(res, run, stream ? &format : nullptr, [&ctx, rp](GenerationRun& r) {
    return dump_json(response_object(rp, &r, output_items(ctx, rp, std::string(r.output(0).visible_text()))));
  });
}

}  // namespace

void register_responses_routes(Router& server, ServerContext& ctx) {
  server.Post("/v1/responses", [&ctx](const HttpRequest& req, HttpResponse& res) { handle_response(ctx, req, res); });
}

}  // namespace serve8
