// SGLang's native routes: POST /generate (text or input_ids, one or a batch, streamed or not), the
// health checks, /get_model_info, /get_server_info, /flush_cache and /abort_request, with the
// shapes SGLang's clients (bench_serving among them) read.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/generation.h"
#include "server/json_params.h"
#include "server/logprobs_json.h"
#include "server/routes.h"

namespace serve8 {

namespace {

Json finish_reason_json(const TextOutput& out) {
  switch (out.reason()) {
    case FinishReason::kNone:
      return nullptr;
    case FinishReason::kStop:
      if (out.matched_token_id() >= 0) return {{"type", "stop"}, {"matched", out.matched_token_id()}};
      return {{"type", "stop"}, {"matched", out.matched_string()}};
    case FinishReason::kLength:
      return {{"type", "length"}, {"length", out.completion_tokens()}};
    case FinishReason::kAbort:
      return {{"type", "abort"}, {"message", out.error().empty() ? "aborted" : out.error()}};
  }
  return nullptr;
}

// SGLang's return_logprob: output tokens' log probabilities in meta_info.
struct LogprobOptions {
  bool want = false;
  bool with_text = false;
  int start = -1;  // logprob_start_len: the prompt's tokens from there on too
  const Tokenizer* tokenizer = nullptr;
};

Json result_json(const GenerationRun& run, size_t i, const LogprobOptions& lp) {
  const TextOutput& out = run.output(i);
  Json meta = {{"id", run.rid(i)},
               {"finish_reason", finish_reason_json(out)},
               {"prompt_tokens", static_cast<int>(run.input_ids(i).size())},
               {"completion_tokens", out.completion_tokens()},
               {"cached_tokens", out.cached_tokens()}};
  if (out.finished()) meta["e2e_latency"] = run.e2e_seconds(i);
  if (lp.want) add_sglang_logprobs(lp.tokenizer, out, lp.with_text, meta);
  if (lp.want && lp.start >= 0)
    add_sglang_prompt_logprobs(lp.tokenizer, out, run.input_ids(i), static_cast<size_t>(lp.start), lp.with_text, meta);
  return {{"text", std::string(out.visible_text())}, {"output_ids", out.output_ids()}, {"meta_info", meta}};
}

// The prompts of a /generate body: `text` (a string or a list) or `input_ids` (a list of ids or
// a list of lists). Sets `batch` when the body holds a list of prompts.
std::vector<GenerationInput> parse_prompts(const ServerContext& ctx, const Json& body, bool& batch) {
  const bool has_text = body.contains("text") && !body["text"].is_null();
  const bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
  if (has_text && has_ids) throw_invalid("text", "Give either 'text' or 'input_ids', not both");
  if (!has_text && !has_ids) throw_invalid("text", "The request needs 'text' or 'input_ids'");
  std::vector<GenerationInput> inputs;
  if (has_text) {
    const Json& text = body["text"];
    std::vector<std::string> texts;
    if (text.is_string()) {
      texts.push_back(text.get<std::string>());
    } else if (text.is_array()) {
      batch = true;
      for (const Json& t : text) {
        if (!t.is_string()) throw_invalid("text", "'text' must be a string or a list of strings");
        texts.push_back(t.get<std::string>());
      }
    } else {
      throw_invalid("text", "'text' must be a string or a list of strings");
    }
    if (ctx.tokenizer() == nullptr)
      throw_invalid("text",
                    "This model has no tokenizer, so it cannot take text; send 'input_ids' instead "
                    "(or start the server with --tokenizer-path)");
    for (const std::string& t : texts) {
      if (t.empty()) throw_invalid("text", "The prompt is empty");
      GenerationInput in;
      in.input_ids = ctx.encode_prompt(t, "text");
      inputs.push_back(std::move(in));
    }
  } else {
    const Json& ids = body["input_ids"];
    if (ids.is_array() && !ids.empty() && ids.front().is_array()) {
      batch = true;
      for (const Json& one : ids) {
        GenerationInput in;
        in.input_ids = read_token_ids(one, "input_ids");
        inputs.push_back(std::move(in));
      }
    } else {
      GenerationInput in;
      in.input_ids = read_token_ids(ids, "input_ids");
      inputs.push_back(std::move(in));
    }
  }
  if (inputs.empty()) throw_invalid(has_text ? "text" : "input_ids", "The batch of prompts is empty");
  return inputs;
}

void handle_generate(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const auto received = Clock::now();
  const Json body = parse_json_object(req.body);
  bool batch = false;
  std::vector<GenerationInput> inputs = parse_prompts(ctx, body, batch);
  const Json sp = body.value("sampling_params", Json());
  if (sp.is_array() && (!batch || sp.size() != inputs.size()))
    throw_invalid("sampling_params", "A list of sampling_params needs one entry per prompt ({} prompts, {} entries)",
                  inputs.size(), sp.size());
  const Json rid = body.value("rid", Json());
  if (!rid.is_null() && !(rid.is_string() && !batch) && !(rid.is_array() && batch && rid.size() == inputs.size()))
    throw_invalid("rid", "'rid' must be a string (or, for a batch, a list with one string per prompt)");
  LogprobOptions lp;
  lp.want = read_bool(body, "return_logprob", "return_logprob").value_or(false);
  lp.with_text = read_bool(body, "return_text_in_logprobs", "return_text_in_logprobs").value_or(false);
  lp.tokenizer = ctx.tokenizer();
  const int64_t top_n = read_integer(body, "top_logprobs_num", "top_logprobs_num").value_or(0);
  if (top_n < 0 || top_n > kMaxTopLogprobs)
    throw_invalid("top_logprobs_num", "'top_logprobs_num' must be between 0 and {}, got {}", kMaxTopLogprobs, top_n);
  // -1 (SGLang's default): log probabilities of the output tokens only; else the prompt's too,
  // from that position on.
  if (const auto start = read_integer(body, "logprob_start_len", "logprob_start_len"); start && *start != -1) {
    if (*start < 0) throw_invalid("logprob_start_len", "'logprob_start_len' must be -1 or >= 0, got {}", *start);
    lp.start = to_int32(*start, "logprob_start_len");
  }
  const bool stream = read_bool(body, "stream", "stream").value_or(false);
  // sampling_params.n: that many samples of one prompt, answered as a list (prefilled once).
  int n = 1;
  for (size_t i = 0; i < (sp.is_array() ? sp.size() : 1); ++i) {
    const Json& one = sp.is_array() ? sp[i] : sp;
    const std::string param = sp.is_array() ? fmt::format("sampling_params[{}].n", i) : "sampling_params.n";
    const int64_t k = one.is_object() ? read_integer(one, "n", param).value_or(1) : 1;
    if (k < 1 || k > kMaxChoices) throw_invalid(param, "'n' must be between 1 and {}, got {}", kMaxChoices, k);
    if (k > 1 && batch) throw_invalid(param, "'n' > 1 takes a single prompt, not a batch");
    n = static_cast<int>(k);
  }
  if (n > 1) {
    inputs.resize(static_cast<size_t>(n), inputs.front());
    batch = true;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    GenerationInput& in = inputs[i];
    const std::string param = batch && n == 1 ? fmt::format("sampling_params[{}]", i) : "sampling_params";
    parse_sglang_sampling_params(sp.is_array() && n == 1 ? sp[i] : sp, param, in.params, in.max_new_tokens_given);
    if (n > 1 && in.params.seed) in.params.seed = *in.params.seed + i;
    if (lp.want) in.params.logprobs = static_cast<int>(top_n);
    if (lp.want && lp.start >= 0) {
      if (lp.start >= static_cast<int>(in.input_ids.size()))
        throw_invalid("logprob_start_len", "'logprob_start_len' ({}) must be less than the prompt's {} tokens",
                      lp.start, in.input_ids.size());
      in.params.prompt_logprobs_start = lp.start;
    }
    if (rid.is_string()) in.rid = n > 1 ? fmt::format("{}-{}", rid.get<std::string>(), i) : rid.get<std::string>();
    if (rid.is_array()) {
      if (!rid[i].is_string()) throw_invalid("rid", "'rid' must be a list of strings");
      in.rid = rid[i].get<std::string>();
    }
    check_generation_input(ctx, in, body.contains("text") ? "text" : "input_ids", param + ".max_new_tokens");
  }
  auto run = std::make_shared<GenerationRun>(ctx, std::move(inputs), received, /*share_prefill=*/n > 1);
  StreamFormat format;
  format.on_change = [batch, lp](GenerationRun& r, const std::vector<size_t>& changed, std::vector<std::string>& out) {
    for (size_t i : changed) {
      Json chunk = result_json(r, i, lp);
      if (batch) chunk["index"] = i;
      out.push_back(dump_json(chunk));
    }
  };
  respond_with_run(res, run, stream ? &format : nullptr, [batch, lp](GenerationRun& r) {
    if (!batch) return dump_json(result_json(r, 0, lp));
    Json all = Json::array();
    for (size_t i = 0; i < r.size(); ++i) all.push_back(result_json(r, i, lp));
    return dump_json(all);
  });
}

// /health_generate: one greedy token through the whole engine.
void handle_health_generate(ServerContext& ctx, HttpResponse& res) {
  GenerationInput in;
  const int bos = ctx.engine.model_config().bos_token_id;
  in.input_ids = {bos >= 0 ? bos : 0};
  in.params.max_new_tokens = 1;
  in.params.temperature = 0.0f;
  in.params.ignore_eos = true;
  in.max_new_tokens_given = true;
  in.rid = "health-" + ctx.new_request_id();
  std::vector<GenerationInput> inputs;
  inputs.push_back(std::move(in));
  GenerationRun run(ctx, std::move(inputs), Clock::now());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!run.all_finished() && Clock::now() < deadline) run.poll(std::chrono::milliseconds(100));
  if (!run.all_finished() || run.output(0).completion_tokens() != 1)
    throw ApiError(503, "The engine did not generate a token within 30 s", "server_error", "", "unhealthy");
  res.status = 200;
}

Json server_info(const ServerContext& ctx) {
  const SchedulerStats s = ctx.engine.stats();
  const EngineArgs& a = ctx.engine_args;
  const KvCacheConfig& kv = ctx.engine.kv_config();
  Json slots = {{"total", s.slots_total},
                {"free", s.slots_free},
                {"used", s.slots_total - s.slots_free},
                {"cached", s.slots_cached},
                {"available", s.slots_free + s.slots_cached}};
  Json internal = {{"num_running_reqs", s.num_running},
                   {"num_waiting_reqs", s.num_waiting},
                   {"last_step_seconds", s.last_step_seconds},
                   {"avg_spec_accept_length", nullptr}};
  Json info = {{"version", "serve8"},
               {"model_path", a.model_path},
               {"tokenizer_path", a.tokenizer_path},
               {"served_model_name", ctx.options.served_model_name},
               {"host", ctx.options.host},
               {"port", ctx.options.port},
               {"device", ctx.engine.backend().name()},
               {"kv_cache_dtype", std::string(dtype_name(kv.dtype))},
               {"kv_bytes_per_token", kv.bytes_per_token()},
               {"context_length", ctx.context_length()},
               {"max_total_num_tokens", s.slots_total},
               {"max_running_requests", a.scheduler.max_running_requests},
               {"chunked_prefill_size", a.scheduler.chunked_prefill_size},
               {"max_prefill_tokens", a.scheduler.max_prefill_tokens},
               {"disable_radix_cache", a.scheduler.disable_radix_cache},
               {"schedule_conservativeness", a.scheduler.schedule_conservativeness},
               {"max_queued_requests", ctx.options.max_queued_requests},
               {"kv_slots", slots},
               {"num_running_reqs", s.num_running},
               {"num_waiting_reqs", s.num_waiting},
               {"cached_tokens", s.cached_prompt_tokens},
               {"prompt_tokens", s.prompt_tokens},
               {"generation_tokens", s.generation_tokens},
               {"radix_hit_rate", s.radix_hit_rate},
               {"num_retractions", s.num_retractions},
               {"num_finished", s.num_finished},
               {"peak_running", s.peak_running},
               {"large_decode_batch", SchedulerStats::kLargeDecodeBatch},
               // At tp > 1 the weights are rank 0's shard: what one GPU reads a step (its MBU's share).
               {"tp_size", ctx.engine.model().tp_shard().size},
               {"weight_bytes", ctx.engine.model().weight_bytes()},
               {"weight_dtype", ctx.engine.model().weight_dtype()},
               {"decode_weight_bytes", ctx.engine.model().decode_weight_bytes()},
               {"internal_states", Json::array({internal})}};
  // Step counters: decode_*, large_decode_* (>= large_decode_batch rows) and prefill_* (steps with
  // prompt tokens, whose prefill_tokens and prefill_decode_rows say what they carried).
  const std::pair<std::string, const StepCounters&> counters[] = {
      {"decode", s.decode}, {"large_decode", s.large_decode}, {"prefill", s.prefill}};
  for (const auto& [n, c] : counters) {
    info[n + "_steps"] = c.steps;
    info[n + "_seconds"] = c.seconds;
    info[n + "_host_seconds"] = c.host_seconds;
    info[n + "_kv_tokens"] = c.kv_tokens;
  }
  info["prefill_tokens"] = s.prefill.prompt_tokens;
  info["prefill_decode_rows"] = s.prefill.decode_rows;
  return info;
}

}  // namespace

void register_sglang_routes(Router& server, ServerContext& ctx) {
  server.Post("/generate", [&ctx](const HttpRequest& req, HttpResponse& res) { handle_generate(ctx, req, res); });
  server.Get("/health", [](const HttpRequest&, HttpResponse& res) { res.status = 200; });
  server.Get("/health_generate", [&ctx](const HttpRequest&, HttpResponse& res) { handle_health_generate(ctx, res); });
  auto model_info = [&ctx](const HttpRequest&, HttpResponse& res) {
    const ModelConfig& mc = ctx.engine.model_config();
    Json info = {{"model_path", ctx.engine_args.model_path},
                 {"tokenizer_path", ctx.engine_args.tokenizer_path},
                 {"served_model_name", ctx.options.served_model_name},
                 {"is_generation", true},
                 {"architectures", Json::array({mc.architecture})},
                 {"context_length", ctx.context_length()},
                 {"vocab_size", mc.vocab_size},
                 {"has_tokenizer", ctx.tokenizer() != nullptr}};
    send_json(res, dump_json(info));
  };
  server.Get("/get_model_info", model_info);
  // sglang-router (0.3) asks /model_info and /server_info first, the /get_ forms after a 404.
  server.Get("/model_info", model_info);
  auto info = [&ctx](const HttpRequest&, HttpResponse& res) { send_json(res, dump_json(server_info(ctx))); };
  server.Get("/get_server_info", info);
  server.Get("/server_info", info);
  auto flush = [&ctx](const HttpRequest&, HttpResponse& res) {
    if (!ctx.engine.flush_cache())
      throw invalid_request("The cache was not flushed: requests are running or waiting; try again when idle");
    res.set_content("Cache flushed.\n", "text/plain");
  };
  server.Post("/flush_cache", flush);
  server.Get("/flush_cache", flush);
  server.Post("/abort_request", [&ctx](const HttpRequest& req, HttpResponse& res) {
    const Json body = parse_json_object(req.body);
    const std::optional<std::string> rid = read_string(body, "rid", "rid");
    if (!rid) throw_invalid("rid", "'rid' is required");
    ctx.engine.abort(*rid);
    res.status = 200;
  });
}

}  // namespace serve8
