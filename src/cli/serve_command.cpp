// `serve8 serve`: the engine behind an HTTP server (SGLang's and OpenAI's APIs) until SIGINT or
// SIGTERM. With no --model-path it serves SmolLM2-135M-Instruct where scripts/setup.sh fetched it,
// else a built-in tiny dummy-weight Llama, so the server can be tried with no checkpoint at hand.
#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"
#include "model/builtin_models.h"
#include "server/server.h"
#include "server/tool_calls.h"

namespace serve8 {

namespace {

namespace fs = std::filesystem;

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }

struct ServeArgs {
  EngineArgs engine;
  ServerOptions server;
};

std::string last_path_component(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::string name = fs::path(path).filename().string();
  return name.empty() ? path : name;
}

int run_serve(ServeArgs a) {
  if (a.engine.model_path.empty()) {
    if (std::string path = find_default_model(); !path.empty()) {
      spdlog::info("no --model-path: serving the default model, SmolLM2-135M-Instruct, from {}", path);
      a.engine.model_path = std::move(path);
    } else {
      spdlog::warn("no --model-path, and {} is not in $SERVE8_MODELS_DIR or .models (scripts/setup.sh fetches it)",
                   kDefaultModelFile);
      a.engine.model_path = kBuiltinTinyLlamaPath;
    }
  }
  if (is_builtin_model_path(a.engine.model_path)) {
    default_to_builtin_model(a.engine);
    spdlog::warn(
        "serving the BUILT-IN tiny Llama ({}): 2 layers, hidden 128, vocab 32000, DUMMY "
        "(random) weights, so its output is noise; tokenizer: {}. Pass --model-path DIR to serve a real model.",
        kBuiltinTinyLlamaPath,
        a.engine.tokenizer_path.empty() ? "none found (../shared/models/llama2-tokenizer), token ids only"
                                        : a.engine.tokenizer_path);
  }
  if (a.server.served_model_name.empty()) a.server.served_model_name = last_path_component(a.engine.model_path);
  SERVE8_CHECK(a.server.port > 0 && a.server.port < 65536, "--port must be in 1..65535, got {}", a.server.port);
  SERVE8_CHECK(a.server.max_request_bytes > 0, "--max-request-bytes must be positive");
  SERVE8_CHECK(a.server.http_timeout_seconds > 0, "--http-timeout must be positive");
  SERVE8_CHECK(a.server.drain_seconds >= 0, "--drain-seconds must be >= 0");
  SERVE8_CHECK(a.server.max_queued_requests >= 0, "--max-queued-requests must be >= 0 (0: unlimited)");
  a.server.version = std::string("serve8 ") + build_commit();

  // Every connection is a descriptor: allow as many as the hard limit does (often 1,024 soft).
  if (rlimit fds{}; getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
    fds.rlim_cur = fds.rlim_max;
    setrlimit(RLIMIT_NOFILE, &fds);
  }
  // A client that disconnects must not kill the server through SIGPIPE on the next write.
  std::signal(SIGPIPE, SIG_IGN);
  if (a.engine.nnodes > 1 && a.engine.node_rank > 0) {
    run_tp_node(a.engine);  // no HTTP here: node 0 serves
    return 0;
  }
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  std::unique_ptr<Engine> engine = create_engine(a.engine);
  engine->start();
  HttpServer server(*engine, a.engine, a.server);
  std::atomic<bool> done{false};
  // Signal handlers may only set a flag; this thread turns the flag into a shutdown.
  std::thread watcher([&] {
    while (!done.load() && g_stop_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_stop_signal != 0) {
      spdlog::info("received signal {}: shutting down (running requests get {} s to finish)",
                   static_cast<int>(g_stop_signal), a.server.drain_seconds);
      server.shutdown();
    }
  });
  try {
    server.run();
  } catch (...) {
    done = true;
    watcher.join();
    throw;
  }
  done = true;
  watcher.join();
  engine->shutdown(false);
  spdlog::info("server stopped");
  return 0;
}

}  // namespace

void register_serve(CLI::App& root, SetAction set_action) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* app = root.add_subcommand("serve", "serve a model over HTTP (SGLang and OpenAI APIs)");
  add_engine_options(*app, a->engine);
  app->add_option("--host", a->server.host, "address to listen on")->capture_default_str();
  app->add_option("--port", a->server.port, "port to listen on")->capture_default_str();
  app->add_option("--api-key", a->server.api_key,
                  "require 'Authorization: Bearer <key>' on every route but /health* and /metrics");
  app->add_flag("--metrics-require-api-key", a->server.metrics_require_api_key,
                "with --api-key, /metrics asks for the key too");
  app->add_option("--served-model-name", a->server.served_model_name,
                  "model name of the OpenAI API (default: the model path's last component)");
  app->add_option("--max-request-bytes", a->server.max_request_bytes, "largest request body; larger gets 413")
      ->capture_default_str();
  app->add_option("--http-timeout", a->server.http_timeout_seconds,
                  "seconds a request's headers, then its body, then each write of its response may take")
      ->capture_default_str();
  app->add_option("--allowed-origins", a->server.allowed_origins,
                  "origins browsers may call the API from (CORS), or '*' for any; none by default");
  app->add_option("--drain-seconds", a->server.drain_seconds,
                  "on SIGTERM, how long admitted requests may finish before they are aborted")
      ->capture_default_str();
  app->add_option("--tool-call-parser", a->server.tool_call_parser,
                  "how tool calls are read from output with tool_choice auto: " + tool_call_parser_names() +
                      " (default: from the chat template's markup, else none)")
      ->check([](const std::string& name) {
        return tool_call_format_from_name(name) ? std::string() : "unknown parser; known: " + tool_call_parser_names();
      });
  app->add_option("--max-queued-requests", a->server.max_queued_requests,
                  "answer 503 while this many requests wait (0: unlimited)")
      ->capture_default_str();
  app->callback([a, set_action] { set_action([a] { return run_serve(*a); }); });
}

}  // namespace serve8
