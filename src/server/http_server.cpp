// The HTTP server on Boost.Beast / Asio: a few event-loop threads own every connection (a waiting
// connection costs no thread), route handlers run on a separate pool (tokenizing or waiting for
// the engine never stalls the loop), and deferred responses stream as the engine delivers. serve8's
// policies sit in front of every route: API key, content type, body size, errors in OpenAI's shape.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/http_session.h"
#include "server/routes.h"
#include "server/server.h"
#include "server/server_context.h"

namespace serve8 {

namespace net = boost::asio;
using tcp = net::ip::tcp;

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

}  // namespace

struct HttpServer::Impl final : SessionHost {
  Impl(Engine& engine, const EngineArgs& args, const ServerOptions& options)
      : ctx(engine, args, options),
        handler_pool(static_cast<size_t>(std::max(16u, std::thread::hardware_concurrency()))) {}

  ServerContext ctx;
  Router router;
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};  // its own strand: shutdown closes it from another thread
  net::thread_pool handler_pool;
  std::atomic<bool> shutting_down{false};
  std::mutex mu;
  std::vector<std::weak_ptr<HttpSession>> sessions;

  const ServerOptions& options() const override { return ctx.options; }
  bool closing() const override { return shutting_down.load(); }
  void run_handler(std::function<void()> fn) override { net::post(handler_pool, std::move(fn)); }
  void rejected() override { ctx.metrics.count_rejected(); }
  HttpResponse handle(HttpRequest& req) override;
  HttpResponse route(HttpRequest& req);

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) {
        if (acceptor.is_open()) accept();
        return;
      }
      auto s = std::make_shared<HttpSession>(std::move(socket), *this);
      {
        std::lock_guard<std::mutex> lk(mu);
        std::erase_if(sessions, [](const std::weak_ptr<HttpSession>& w) { return w.expired(); });
        sessions.push_back(s);
      }
      s->start();
      accept();
    });
  }

  std::vector<std::shared_ptr<HttpSession>> live_sessions() {
    std::lock_guard<std::mutex> lk(mu);
    std::vector<std::shared_ptr<HttpSession>> out;
    for (const auto& w : sessions)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }
};

HttpResponse HttpServer::Impl::handle(HttpRequest& req) {
  HttpResponse res = route(req);
  // CORS: only for the origins --allowed-origins names.
  const std::string origin = req.get_header_value("Origin");
  const auto& allowed = ctx.options.allowed_origins;
  if (!origin.empty()) {
    if (std::find(allowed.begin(), allowed.end(), "*") != allowed.end()) {
      res.set_header("Access-Control-Allow-Origin", "*");
    } else if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
  }
  return res;
}

HttpResponse HttpServer::Impl::route(HttpRequest& req) {
  HttpResponse res;
  const auto fail = [&](const ApiError& e) {
    ctx.metrics.count_rejected();
    send_error(res, e);
  };
  if (!ctx.options.api_key.empty() && req.method != "OPTIONS" && !is_public_path(req.path, ctx.options)) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const std::string key = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
    if (!constant_time_equals(key, ctx.options.api_key)) {
      fail(ApiError(401, "Missing or invalid API key: send 'Authorization: Bearer <key>'", "authentication_error", "",
                    "invalid_api_key"));
      return res;
    }
  }
  if (req.method == "POST" && takes_json(req.path) && req.has_header("Content-Type")) {
    const std::string type = req.get_header_value("Content-Type");
    if (type.find("application/json") == std::string::npos) {
      fail(ApiError(415, fmt::format("Content-Type must be application/json, got '{}'", type), "invalid_request_error",
                    "", "unsupported_media_type"));
      return res;
    }
  }
  const Handler* h = router.find(req);
  if (h == nullptr) {
    fail(ApiError(404, fmt::format("Not found: {} {}", req.method, req.path), "invalid_request_error"));
    return res;
  }
  try {
    (*h)(req, res);
  } catch (const ApiError& e) {
    spdlog::debug("{} {}: {} {}", req.method, req.path, e.status(), e.message());
    res = HttpResponse();
    fail(e);
  } catch (const Error& e) {
    // serve8::Error from a tokenizer or template: the request was at fault.
    res = HttpResponse();
    fail(invalid_request(e.what()));
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", req.method, req.path, e.what());
    res = HttpResponse();
    fail(ApiError(500, std::string("Internal error: ") + e.what(), "server_error"));
  }
  return res;
}

HttpServer::HttpServer(Engine& engine, const EngineArgs& engine_args, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, engine_args, options)) {
  ServerContext& ctx = impl_->ctx;
  Router& router = impl_->router;
  engine.set_step_observer([&ctx](double seconds) { ctx.metrics.observe_step(seconds); });
  router.Get("/metrics", [&ctx](const HttpRequest&, HttpResponse& res) {
    res.set_content(ctx.metrics.render(ctx.engine.stats(), ctx.in_flight.load()), "text/plain; version=0.0.4");
  });
  register_sglang_routes(router, ctx);
  register_openai_routes(router, ctx);
  register_tokenize_routes(router, ctx);
  register_responses_routes(router, ctx);
  register_router_routes(router, ctx);
}

HttpServer::~HttpServer() {
  impl_->ioc.stop();
  impl_->handler_pool.join();
}

void HttpServer::run() {
  Impl& s = *impl_;
  const ServerOptions& o = s.ctx.options;
  boost::system::error_code ec;
  tcp::resolver resolver(s.ioc);
  const auto found = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  SERVE8_CHECK(!ec && !found.empty(), "cannot listen on {}:{}: {}", o.host, o.port,
               ec ? ec.message() : "no address");
  const tcp::endpoint ep = found.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  // A burst of connections (bench-serving --request-rate inf opens one per request at once) must
  // not overflow the accept queue.
  if (!ec) s.acceptor.listen(4096, ec);
  SERVE8_CHECK(!ec, "cannot listen on {}:{} ({}: in use, or not an address of this host)", o.host, o.port,
               ec.message());
  if (s.shutting_down) return;  // a signal arrived while the engine was loading
  spdlog::info("serving '{}' on http://{}:{} (OpenAI API at /v1, SGLang API at /generate){}", o.served_model_name,
               o.host, o.port, o.api_key.empty() ? "" : "; API key required");
  s.accept();
  const int n = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
  std::vector<std::thread> loops;
  for (int i = 1; i < n; ++i) loops.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (std::thread& t : loops) t.join();
}

void HttpServer::shutdown() {
  Impl& s = *impl_;
  if (s.shutting_down.exchange(true)) return;
  ServerContext& ctx = s.ctx;
  ctx.draining = true;
  // No new connections; every connection without an admitted request closes now (a client
  // trickling its headers or body holds nothing).
  net::post(s.acceptor.get_executor(), [&s] {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
  });
  for (const auto& session : s.live_sessions()) session->close_if_idle();
  const auto deadline = Clock::now() + std::chrono::duration<double>(ctx.options.drain_seconds);
  while (ctx.in_flight.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (ctx.in_flight.load() > 0)
    spdlog::warn("shutdown: aborting {} request(s) still running after {} s", ctx.in_flight.load(),
                 ctx.options.drain_seconds);
  ctx.engine.shutdown(false);
  // Let the aborted streams write their last events, then close what is left and stop.
  const auto last = Clock::now() + std::chrono::milliseconds(200);
  while (ctx.in_flight.load() > 0 && Clock::now() < last) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (const auto& session : s.live_sessions()) session->close();
  s.ioc.stop();
}

}  // namespace serve8
