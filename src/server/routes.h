// What the route files share: registration entry points and the helpers that turn a
// GenerationRun or an error into an HTTP response. Internal to server/.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/http_message.h"
#include "server/json_params.h"

namespace serve8 {

struct ServerContext;
class GenerationRun;
class ApiError;

void register_sglang_routes(Router& server, ServerContext& ctx);
void register_openai_routes(Router& server, ServerContext& ctx);
void register_tokenize_routes(Router& server, ServerContext& ctx);
void register_responses_routes(Router& server, ServerContext& ctx);
void register_router_routes(Router& server, ServerContext& ctx);

// The OpenAI model object of the served model (/v1/models and /v1/models/{id}).
Json model_object(const ServerContext& ctx);
// Throws model_not_found when a body's "model" names another model (its omission is accepted).
void check_model(const ServerContext& ctx, const Json& body);

void send_json(HttpResponse& res, const std::string& body, int status = 200);
void send_error(HttpResponse& res, const ApiError& e);

// How a streamed response renders its server-sent events.
struct StreamFormat {
  // Payloads (JSON texts) for the requests of the run whose output changed.
  std::function<void(GenerationRun& run, const std::vector<size_t>& changed, std::vector<std::string>& out)> on_change;
  // Payloads after every request finished (OpenAI's usage chunk); may be left empty.
  std::function<void(GenerationRun& run, std::vector<std::string>& out)> on_end;
  // The payloads are whole events ("event: ...\ndata: ...\n\n", the Responses API's), sent as
  // they are and not closed by "data: [DONE]".
  bool whole_events = false;
};

// Answers with `run`'s output, deferred: as server-sent events ("data: {...}\n\n" ... "data:
// [DONE]\n\n") when `format` is given, else as the single JSON body `body(run)` once every request
// finished. An engine refusal that arrives promptly becomes an error status; a client that
// disconnects while its requests run has them aborted.
void respond_with_run(HttpResponse& res, std::shared_ptr<GenerationRun> run, const StreamFormat* format,
                      std::function<std::string(GenerationRun& run)> body);

}  // namespace serve8
