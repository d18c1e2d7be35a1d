// What sglang-router asks a worker beyond the generation routes: GET /get_load (its /get_loads
// and load-polling policies read each worker's `num_tokens`), and the model name SGLang's metrics
// carry as their `model_name` label. /health, /server_info and /model_info (the router tries those
// before the /get_ forms) live with SGLang's other native routes in sglang_api.cpp.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/json_params.h"
#include "server/routes.h"
#include "server/server_context.h"

namespace serve8 {

namespace {

// SGLang's GetLoadReqOutput, one per data-parallel rank (serve8 has one): num_tokens counts the KV
// tokens requests hold (the radix cache's evictable ones are free to take). SGLang adds the
// waiting requests' prompt tokens, which the engine's stats do not carry; num_reqs counts them.
Json load_json(const ServerContext& ctx) {
  const SchedulerStats s = ctx.engine.stats();
  const int64_t held = std::max<int64_t>(0, s.slots_total - s.slots_free - s.slots_cached);
  return Json::array({{{"dp_rank", 0},
                       {"num_reqs", s.num_running + s.num_waiting},
                       {"num_waiting_reqs", s.num_waiting},
                       {"num_tokens", held}}});
}

}  // namespace

void register_router_routes(Router& server, ServerContext& ctx) {
  // Registration runs before the listener opens, so no scrape sees the label unset.
  ctx.metrics.set_model_name(ctx.options.served_model_name);
  server.Get("/get_load", [&ctx](const HttpRequest&, HttpResponse& res) { send_json(res, dump_json(load_json(ctx))); });
}

}  // namespace serve8
