// OpenAI's routes: /v1/models, /v1/completions and /v1/chat/completions, streamed
// ("chat.completion.chunk" deltas, usage last when stream_options.include_usage) or not.
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/json_params.h"
#include "server/logprobs_json.h"
#include "server/routes.h"

namespace serve8 {

namespace {

// "tool_calls" when the choice ended by itself with calls (a call cut by max_tokens stays "length").
Json finish_reason(const TextOutput& out, bool called = false) {
  if (!out.finished()) return nullptr;
  if (called && out.reason() == FinishReason::kStop) return "tool_calls";
  return finish_reason_name(out.reason());
}

Json matched_stop(const TextOutput& out) {
  if (out.matched_token_id() >= 0) return out.matched_token_id();
  if (!out.matched_string().empty()) return out.matched_string();
  return nullptr;
}

// With n choices per prompt, request i is choice i % n of prompt i / n: its prompt counts once.
Json usage_json(const GenerationRun& run, int n) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < run.size(); ++i) {
    if (i % static_cast<size_t>(n) == 0) prompt += static_cast<int64_t>(run.input_ids(i).size());
    completion += run.output(i).completion_tokens();
    cached += run.output(i).cached_tokens();
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

struct Common {
  std::string id;
  int64_t created = 0;
  bool stream = false;
  bool include_usage = false;
};

Common read_common(ServerContext& ctx, const Json& body, const char* id_prefix) {
  Common c;
  c.id = std::string(id_prefix) + ctx.new_request_id();
  c.created = static_cast<int64_t>(std::time(nullptr));
  c.stream = read_bool(body, "stream", "stream").value_or(false);
  auto it = body.find("stream_options");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw_invalid("stream_options", "'stream_options' must be an object");
    c.include_usage = read_bool(*it, "include_usage", "stream_options.include_usage").value_or(false);
  }
  return c;
}

// The prompts of a completions body: a string, a list of strings, a list of ids or a list of lists.
// With `echo`, each prompt's text too: strings as sent, ids through the tokenizer.
std::vector<GenerationInput> completion_prompts(const ServerContext& ctx, const Json& body,
                                                std::vector<std::string>* echo) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw_invalid("prompt", "'prompt' is required");
  const Json& prompt = *it;
  std::vector<GenerationInput> inputs;
  auto add_text = [&](const Json& t) {
    if (!t.is_string()) throw_invalid("prompt", "'prompt' must be a string, a list of strings or token ids");
    const std::string text = t.get<std::string>();
    if (text.empty()) throw_invalid("prompt", "The prompt is empty");
    if (ctx.tokenizer() == nullptr)
      throw_invalid("prompt", "This model has no tokenizer, so it cannot take text; send the prompt as token ids");
    GenerationInput in;
    in.input_ids = ctx.encode_prompt(text, "prompt");
    inputs.push_back(std::move(in));
    if (echo) echo->push_back(text);
  };
  auto add_ids = [&](const Json& ids) {
    GenerationInput in;
    in.input_ids = read_token_ids(ids, "prompt");
    if (echo) echo->push_back(ctx.tokenizer() ? ctx.tokenizer()->decode(in.input_ids, false) : "");
    inputs.push_back(std::move(in));
  };
  if (prompt.is_string()) {
    add_text(prompt);
  } else if (is_token_list(prompt)) {
    add_ids(prompt);
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const Json& p : prompt) {
      if (p.is_array()) {
        add_ids(p);
      } else {
        add_text(p);
      }
    }
  } else {
    throw_invalid("prompt", "'prompt' must be a non-empty string, a list of strings or token ids");
  }
  return inputs;
}

// echo: completions' "echo", each prompt's text put before its choices' text (empty: no echo).
// tools: chat's tools when the output may hold calls (null: text only).
void run_openai(ServerContext& ctx, HttpResponse& res, const Json& body, bool chat,
                std::vector<GenerationInput> inputs, const Common& c, Clock::time_point received,
                std::vector<std::string> echo = {}, std::shared_ptr<const ToolsRequest> tools = nullptr) {
  SamplingParams params;
  bool max_given = false;
  if (tools && tools->forcing()) {
    const Json* rf = field(body, "response_format");
    if (rf && !(rf->is_object() && rf->value("type", Json()) == "text"))
      throw_invalid("tool_choice", "'tool_choice' \"{}\" constrains the output, and so does response_format: send one",
                    tools->choice == ToolsRequest::Choice::kNamed ? tools->forced : "required");
  }
  parse_openai_sampling_params(body, chat, params, max_given);
  if (tools) apply_tool_choice(*tools, field(body, "skip_special_tokens") != nullptr, params);
  const int choices = read_openai_n(body);
  // Completions' best_of: that many candidates per prompt, the `n` with the highest total log
  // probability returned (OpenAI's rule; not streamed).
  const int n = chat ? choices : static_cast<int>(read_integer(body, "best_of", "best_of").value_or(choices));
  if (chat && read_integer(body, "best_of", "best_of").value_or(1) != 1)
    throw_invalid("best_of", "'best_of' is a completions parameter");
  if (n < choices || n > kMaxChoices)
    throw_invalid("best_of", "'best_of' must be between n = {} and {}, got {}", choices, kMaxChoices, n);
  if (n > choices && c.stream) throw_invalid("best_of", "'best_of' > n cannot be streamed");
  const bool show_lp = params.logprobs >= 0;
  if (n > choices && !show_lp) params.logprobs = 0;  // the candidates are ranked by their log probabilities
  if (n > 1) {
    // Choice j of prompt i is request i * n + j (OpenAI's order); a given seed becomes seed + j so
    // the choices differ and stay reproducible.
    std::vector<GenerationInput> fanned;
    fanned.reserve(inputs.size() * static_cast<size_t>(n));
    for (GenerationInput& in : inputs)
      for (int j = 0; j < n; ++j) fanned.push_back(in);
    inputs = std::move(fanned);
  }
  auto echo_of = std::make_shared<const std::vector<std::string>>(std::move(echo));
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].params = params;
    if (params.seed) inputs[i].params.seed = *params.seed + i % static_cast<size_t>(n);
    inputs[i].max_new_tokens_given = max_given;
    if (!chat && show_lp && !echo_of->empty()) inputs[i].params.prompt_logprobs_start = 0;
    inputs[i].rid = inputs.size() == 1 ? c.id : fmt::format("{}-{}", c.id, i);
    check_generation_input(ctx, inputs[i], chat ? "messages" : "prompt", "max_tokens");
  }
  auto run = std::make_shared<GenerationRun>(ctx, std::move(inputs), received, /*share_prefill=*/n > 1);
  const std::string model = ctx.options.served_model_name;
  const char* object = chat ? "chat.completion.chunk" : "text_completion";
  auto chunk_base = [c, model, object] {
    return Json{{"id", c.id}, {"object", object}, {"created", c.created}, {"model", model}};
  };
  StreamFormat format;
  // Chat streams open with the assistant role, as OpenAI's do, before any content.
  auto opened = std::make_shared<std::vector<bool>>(run->size(), false);
  // Log probabilities: those of the tokens since the last chunk go with each chunk.
  const Tokenizer* tok = ctx.tokenizer();
  const bool want_lp = show_lp;
  auto lp_sent = std::make_shared<std::vector<size_t>>(run->size(), 0);
  // Each choice's tool calls, parsed from its text as it streams.
  auto new_call_id = [&ctx] { return "call_" + ctx.new_request_id().substr(0, 24); };
  auto tool_out = std::make_shared<std::vector<std::unique_ptr<ToolCallOutput>>>();
  if (tools)
    for (size_t i = 0; i < run->size(); ++i) tool_out->push_back(std::make_unique<ToolCallOutput>(*tools, new_call_id));
  auto echo_len = [echo_of, n](size_t i) { return echo_of->empty() ? size_t{0} : (*echo_of)[i / static_cast<size_t>(n)].size(); };
  // With echo, the prompt's tokens lead the completion's list (in the first chunk when streamed).
  const bool echo_lp = !chat && want_lp && !echo_of->empty();
  auto logprobs_of = [=](const GenerationRun& r, size_t i, size_t begin, size_t end) -> Json {
    if (!want_lp) return nullptr;
    const TextOutput& o = r.output(i);
    if (echo_lp && begin == 0) return echo_completion_logprobs(tok, o, r.input_ids(i), end);
    return chat ? chat_logprobs(tok, o, begin, end) : completion_logprobs(tok, o, begin, end, echo_len(i));
  };
  format.on_change = [=](GenerationRun& r, const std::vector<size_t>& changed, std::vector<std::string>& out) {
    for (size_t i : changed) {
      TextOutput& o = r.output(i);
      std::string delta = o.take_delta();
      if (!chat && !echo_of->empty() && !(*opened)[i]) delta = (*echo_of)[i / static_cast<size_t>(n)] + delta;
      ToolOutputDelta calls;
      if (!tool_out->empty()) {
        ToolCallOutput& t = *(*tool_out)[i];
        calls = t.push(delta);
        if (o.finished()) {
          ToolOutputDelta rest = t.finish();
          calls.content += rest.content;
          calls.calls.insert(calls.calls.end(), rest.calls.begin(), rest.calls.end());
        }
        delta = std::move(calls.content);
      }
      if (delta.empty() && calls.calls.empty() && !o.finished() && (!chat || (*opened)[i])) continue;
      const bool called = !tool_out->empty() && !(*tool_out)[i]->calls().empty();
      Json choice = {{"index", i}, {"logprobs", logprobs_of(r, i, (*lp_sent)[i], o.logprobs().size())},
                     {"finish_reason", finish_reason(o, called)}};
      (*lp_sent)[i] = o.logprobs().size();
      if (chat) {
        Json d = Json::object();
        if (!(*opened)[i]) d["role"] = "assistant";
        if (!delta.empty() || !(*opened)[i]) d["content"] = delta;
        if (!calls.calls.empty()) d["tool_calls"] = tool_call_deltas_json(calls.calls);
        (*opened)[i] = true;
        choice["delta"] = d;
      } else {
        (*opened)[i] = true;
        choice["text"] = delta;
      }
      if (o.finished()) choice["matched_stop"] = matched_stop(o);
      Json chunk = chunk_base();
      chunk["choices"] = Json::array({choice});
      chunk["usage"] = nullptr;
      out.push_back(dump_json(chunk));
    }
  };
  if (c.include_usage) {
    format.on_end = [=](GenerationRun& r, std::vector<std::string>& out) {
      Json chunk = chunk_base();
      chunk["choices"] = Json::array();
      chunk["usage"] = usage_json(r, n);
      out.push_back(dump_json(chunk));
    };
  }
  respond_with_run(res, run, c.stream ? &format : nullptr, [=](GenerationRun& r) {
    // The requests answered: all of them, or per prompt the `choices` best of its n candidates.
    std::vector<size_t> picked;
    for (size_t p0 = 0; p0 < r.size(); p0 += static_cast<size_t>(n)) {
      std::vector<size_t> group(static_cast<size_t>(n));
      for (size_t j = 0; j < group.size(); ++j) group[j] = p0 + j;
      if (n > choices) {
        const auto total = [&r](size_t i) {
          double t = 0.0;
          for (const RowLogprobs& lp : r.output(i).logprobs()) t += lp.chosen;
          return t;
        };
        std::stable_sort(group.begin(), group.end(), [&](size_t a, size_t b) { return total(a) > total(b); });
        group.resize(static_cast<size_t>(choices));
      }
      picked.insert(picked.end(), group.begin(), group.end());
    }
    Json choices_json = Json::array();
    for (size_t k = 0; k < picked.size(); ++k) {
      const size_t i = picked[k];
      const TextOutput& o = r.output(i);
      Json choice = {{"index", k},
                     {"logprobs", logprobs_of(r, i, 0, o.logprobs().size())},
                     {"finish_reason", finish_reason(o)},
                     {"matched_stop", matched_stop(o)}};
      const std::string text =
          (echo_of->empty() ? std::string() : (*echo_of)[i / static_cast<size_t>(n)]) + std::string(o.visible_text());
      if (chat && tools) {
        // The calls' markup leaves the content; with calls and nothing else it is null, as OpenAI's.
        const ParsedToolCalls parsed = ToolCallOutput(*tools, new_call_id).parse(text);
        const bool called = !parsed.calls.empty();
        choice["message"] = {{"role", "assistant"},
                             {"content", called && parsed.content.empty() ? Json(nullptr) : Json(parsed.content)}};
        if (called) choice["message"]["tool_calls"] = tool_calls_json(parsed.calls);
        choice["finish_reason"] = finish_reason(o, called);
      } else if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      } else {
        choice["text"] = text;
      }
      choices_json.push_back(choice);
    }
    return dump_json(Json{{"id", c.id},
                          {"object", chat ? "chat.completion" : "text_completion"},
                          {"created", c.created},
                          {"model", model},
                          {"choices", choices_json},
                          {"usage", usage_json(r, n)}});
  });
}

}  // namespace

void register_openai_routes(Router& server, ServerContext& ctx) {
  server.Get("/v1/models", [&ctx](const HttpRequest&, HttpResponse& res) {
    send_json(res, dump_json(Json{{"object", "list"}, {"data", Json::array({model_object(ctx)})}}));
  });
  server.Post("/v1/completions", [&ctx](const HttpRequest& req, HttpResponse& res) {
    const auto received = Clock::now();
    const Json body = parse_json_object(req.body);
    check_model(ctx, body);
    const Common c = read_common(ctx, body, "cmpl-");
    std::vector<std::string> echo;
    std::vector<GenerationInput> inputs =
        completion_prompts(ctx, body, read_bool(body, "echo", "echo").value_or(false) ? &echo : nullptr);
    run_openai(ctx, res, body, false, std::move(inputs), c, received, std::move(echo));
  });
  server.Post("/v1/chat/completions", [&ctx](const HttpRequest& req, HttpResponse& res) {
    const auto received = Clock::now();
    const Json body = parse_json_object(req.body);
    check_model(ctx, body);
    const Common c = read_common(ctx, body, "chatcmpl-");
    const Json messages = chat_messages(body);
    if (ctx.tokenizer() == nullptr)
      throw_invalid("messages", "This model has no tokenizer, so it cannot serve chat; use /generate with input_ids");
    if (!ctx.tokenizer()->has_chat_template())
      throw_invalid("messages", "This model has no chat template; use /v1/completions");
    auto tools = std::make_shared<const ToolsRequest>(read_chat_tools(body, ctx.tool_call_format));
    GenerationInput in;
    in.input_ids = encode_chat_prompt(ctx, messages, *tools, "messages");
    std::vector<GenerationInput> inputs;
    inputs.push_back(std::move(in));
    run_openai(ctx, res, body, true, std::move(inputs), c, received, {},
               tools->choice == ToolsRequest::Choice::kNone ? nullptr : tools);
  });
}

}  // namespace serve8
