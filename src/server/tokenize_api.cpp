// The small routes apps and routers reach for beside generation: /tokenize and /detokenize (the
// bodies SGLang and vLLM take), /version, one model by id (/v1/models/{id}) and CORS.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/api_error.h"
#include "server/json_params.h"
#include "server/routes.h"
#include "server/server_context.h"

namespace serve8 {

namespace {

const Tokenizer& require_tokenizer(const ServerContext& ctx) {
  if (ctx.tokenizer() == nullptr)
    throw invalid_request("This model has no tokenizer (start the server with --tokenizer-path)");
  return *ctx.tokenizer();
}

}  // namespace

void check_model(const ServerContext& ctx, const Json& body) {
  // The model field is required by OpenAI; serve8 accepts its omission, but never a wrong name.
  if (auto model = read_string(body, "model", "model"); model && *model != ctx.options.served_model_name)
    throw model_not_found(*model, ctx.options.served_model_name);
}

Json model_object(const ServerContext& ctx) {
  return {{"id", ctx.options.served_model_name},   {"object", "model"},
          {"created", ctx.created_unix},           {"owned_by", "serve8"},
          {"root", ctx.options.served_model_name}, {"max_model_len", ctx.context_length()}};
}

void register_tokenize_routes(Router& server, ServerContext& ctx) {
  server.Post("/tokenize", [&ctx](const HttpRequest& req, HttpResponse& res) {
    const Json body = parse_json_object(req.body);
    check_model(ctx, body);
    const Tokenizer& tok = require_tokenizer(ctx);
    const bool special = read_bool(body, "add_special_tokens", "add_special_tokens").value_or(true);
    std::vector<int32_t> ids;
    if (const auto prompt = read_string(body, "prompt", "prompt")) {
      ctx.check_prompt_bytes(prompt->size(), "prompt");
      ids = tok.encode(*prompt, special);
    } else {
      throw_invalid("prompt", "'prompt' (a string) is required");
    }
    send_json(res, dump_json(Json{{"tokens", ids},
                                  {"count", ids.size()},
                                  {"max_model_len", ctx.context_length()}}));
  });
  server.Post("/detokenize", [&ctx](const HttpRequest& req, HttpResponse& res) {
    const Json body = parse_json_object(req.body);
    check_model(ctx, body);
    const Tokenizer& tok = require_tokenizer(ctx);
    if (!body.contains("tokens")) throw_invalid("tokens", "'tokens' (a list of token ids) is required");
    const std::vector<int32_t> ids = read_token_ids(body["tokens"], "tokens");
    for (int32_t id : ids)
      if (id < 0 || id >= ctx.vocab_size())
        throw_invalid("tokens", "Token id {} is outside the vocabulary [0, {})", id, ctx.vocab_size());
    const std::string text = tok.decode(ids, read_bool(body, "skip_special_tokens", "skip_special_tokens")
                                                 .value_or(false));
    // vLLM answers {"prompt"}, SGLang {"text"}: both, so either client reads it.
    send_json(res, dump_json(Json{{"prompt", text}, {"text", text}}));
  });
  server.Get("/version", [&ctx](const HttpRequest&, HttpResponse& res) {
    send_json(res, dump_json(Json{{"version", ctx.options.version}}));
  });
  // CORS preflights: the methods and headers; which origins may call is --allowed-origins' (the
  // server adds Access-Control-Allow-Origin for those).
  server.Options(R"(.*)", [](const HttpRequest&, HttpResponse& res) {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "86400");
  });
  server.Get(R"(/v1/models/(.+))", [&ctx](const HttpRequest& req, HttpResponse& res) {
    const std::string id = req.matches[1];
    if (id != ctx.options.served_model_name) throw model_not_found(id, ctx.options.served_model_name);
    send_json(res, dump_json(model_object(ctx)));
  });
}

}  // namespace serve8
