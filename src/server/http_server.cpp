// The HTTP server: cpp-httplib's Server with serve8's policies in front of every route (API key,
// content type, body size, error bodies in OpenAI's shape) and a clean shutdown.
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/json_params.h"
#include "server/routes.h"
#include "server/server.h"
#include "server/server_context.h"

namespace serve8 {

namespace {

// Compares a presented key with the configured one in time that depends only on the configured
// key's length, so response timing does not reveal how much of a guess was right.
bool constant_time_equals(const std::string& given, const std::string& expected) {
  volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = static_cast<unsigned char>(diff | (g ^ static_cast<unsigned char>(expected[i])));
  }
  return diff == 0;
}

bool is_public_path(const std::string& path, const ServerOptions& o) {
  return path == "/health" || path == "/health_generate" || (path == "/metrics" && !o.metrics_require_api_key);
}

// Routes whose POST body is JSON.
bool takes_json(const std::string& path) { return path != "/flush_cache"; }

std::string default_error_message(int status, const httplib::Request& req) {
  switch (status) {
    case 404:
      return fmt::format("Not found: {} {}", req.method, req.path);
    case 413:
      return "The request body is too large (see --max-request-bytes)";
    default:
      return fmt::format("HTTP {} for {} {}", status, req.method, req.path);
  }
}

}  // namespace

ServerContext::ServerContext(Engine& e, const EngineArgs& args, const ServerOptions& opts)
    : engine(e),
      engine_args(args),
      options(opts),
      created_unix(static_cast<int64_t>(std::time(nullptr))),
      id_state_(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)) {
  if (const Tokenizer* t = e.tokenizer()) {
    for (int32_t id = 0; id < t->vocab_size(); ++id)
      longest_token_bytes_ = std::max(longest_token_bytes_, t->decode(std::span<const int32_t>(&id, 1), false).size());
  }
}

void ServerContext::check_prompt_bytes(size_t bytes, const std::string& param) const {
  const uint64_t limit = 4ull * static_cast<uint64_t>(context_length()) * std::max<size_t>(longest_token_bytes_, 1);
  if (bytes > limit)
    throw_invalid(param,
                  "The prompt has {} bytes: more than this model's maximum context length of {} tokens can hold "
                  "(its longest token has {} bytes)",
                  bytes, context_length(), longest_token_bytes_);
}

std::vector<int32_t> ServerContext::encode_prompt(const std::string& text, const std::string& param) const {
  check_prompt_bytes(text.size(), param);
  return tokenizer()->encode(text, true);
}

std::string ServerContext::new_request_id() {
  std::lock_guard<std::mutex> lk(mu_);
  // splitmix64: distinct ids from one random seed, cheap under the lock.
  auto next = [this] {
    uint64_t z = (id_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t a = next();
  const uint64_t b = next();
  return fmt::format("{:016x}{:016x}", a, b);
}

bool ServerContext::claim_rid(const std::string& rid) {
  std::lock_guard<std::mutex> lk(mu_);
  return active_rids_.insert(rid).second;
}

void ServerContext::release_rid(const std::string& rid) {
  std::lock_guard<std::mutex> lk(mu_);
  active_rids_.erase(rid);
}

struct HttpServer::Impl {
  Impl(Engine& engine, const EngineArgs& args, const ServerOptions& options) : ctx(engine, args, options) {}

  ServerContext ctx;
  httplib::Server server;
  std::atomic<bool> shutting_down{false};
  socket_t listen_socket = INVALID_SOCKET;
};

// Debian's compiled cpp-httplib (0.11) listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed
// when the library was built): a burst of connections (bench-serving --request-rate inf opens one
// per request at once) overflows the accept queue, and some of them fail with a read error before
// any handler sees them. Listening again on the bound socket raises the backlog (Linux).
constexpr int kListenBacklog = 4096;

HttpServer::HttpServer(Engine& engine, const EngineArgs& engine_args, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, engine_args, options)) {
  ServerContext& ctx = impl_->ctx;
  httplib::Server& svr = impl_->server;
  engine.set_step_observer([&ctx](double seconds) { ctx.metrics.observe_step(seconds); });

  // Every connection holds a thread while its request runs, so the pool must exceed the batch the
  // engine can run, or requests would queue in the pool instead of in the scheduler.
  const size_t threads = static_cast<size_t>(std::max(128, 2 * engine_args.scheduler.max_running_requests + 64));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_socket_options([impl = impl_.get()](socket_t sock) {
    httplib::default_socket_options(sock);
    impl->listen_socket = sock;
  });
  svr.set_payload_max_length(options.max_request_bytes);
  svr.set_keep_alive_timeout(2);
  svr.set_read_timeout(options.http_timeout_seconds);
  svr.set_write_timeout(options.http_timeout_seconds);

  svr.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!ctx.options.api_key.empty() && req.method != "OPTIONS" && !is_public_path(req.path, ctx.options)) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      const std::string key = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
      if (!constant_time_equals(key, ctx.options.api_key)) {
        ctx.metrics.count_rejected();
        send_error(res, ApiError(401, "Missing or invalid API key: send 'Authorization: Bearer <key>'",
                                 "authentication_error", "", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.method == "POST" && takes_json(req.path) && req.has_header("Content-Type")) {
      const std::string type = req.get_header_value("Content-Type");
      if (type.find("application/json") == std::string::npos) {
        ctx.metrics.count_rejected();
        send_error(res, ApiError(415, fmt::format("Content-Type must be application/json, got '{}'", type),
                                 "invalid_request_error", "", "unsupported_media_type"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_exception_handler([&ctx](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    ctx.metrics.count_rejected();
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      spdlog::debug("{} {}: {} {}", req.method, req.path, e.status(), e.message());
      send_error(res, e);
    } catch (const Error& e) {
      // serve8::Error from a tokenizer or template: the request was at fault.
      send_error(res, invalid_request(e.what()));
    } catch (const std::exception& e) {
      spdlog::error("{} {}: {}", req.method, req.path, e.what());
      send_error(res, ApiError(500, std::string("Internal error: ") + e.what(), "server_error"));
    } catch (...) {
      send_error(res, ApiError(500, "Internal error", "server_error"));
    }
  });
  // Errors httplib produces itself (404 route, 413 body, 400 bad request line) get OpenAI's body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const int status = res.status;
    const char* type = status >= 500 ? "server_error" : "invalid_request_error";
    send_error(res, ApiError(status, default_error_message(status, req), type));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    spdlog::debug("{} {} {} -> {}", req.remote_addr, req.method, req.path, res.status);
  });

  svr.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.engine.stats(), ctx.in_flight.load()), "text/plain; version=0.0.4");
  });
  register_sglang_routes(svr, ctx);
  register_openai_routes(svr, ctx);
  register_tokenize_routes(svr, ctx);
}

HttpServer::~HttpServer() = default;

void HttpServer::run() {
  const ServerOptions& o = impl_->ctx.options;
  httplib::Server& svr = impl_->server;
  SERVE8_CHECK(svr.bind_to_port(o.host, o.port), "cannot listen on {}:{} (in use, or not an address of this host)",
               o.host, o.port);
  if (impl_->listen_socket != INVALID_SOCKET && ::listen(impl_->listen_socket, kListenBacklog) != 0)
    spdlog::warn("could not raise the listen backlog to {}: {}", kListenBacklog, std::strerror(errno));
  if (impl_->shutting_down) return;  // a signal arrived while the engine was loading
  spdlog::info("serving '{}' on http://{}:{} (OpenAI API at /v1, SGLang API at /generate){}", o.served_model_name,
               o.host, o.port, o.api_key.empty() ? "" : "; API key required");
  svr.listen_after_bind();
}

void HttpServer::shutdown() {
  if (impl_->shutting_down.exchange(true)) return;
  ServerContext& ctx = impl_->ctx;
  ctx.draining = true;
  impl_->server.stop();  // no new connections; listen returns once every handler has
  const auto deadline = Clock::now() + std::chrono::duration<double>(ctx.options.drain_seconds);
  while (ctx.in_flight.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (ctx.in_flight.load() > 0)
    spdlog::warn("shutdown: aborting {} request(s) still running after {} s", ctx.in_flight.load(),
                 ctx.options.drain_seconds);
  ctx.engine.shutdown(false);
}

}  // namespace serve8
