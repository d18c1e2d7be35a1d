// HttpServer: the HTTP front of one Engine: SGLang's native routes (/generate, /get_server_info,
// /flush_cache...), OpenAI's (/v1/completions, /v1/chat/completions, /v1/models) and Prometheus
// /metrics. Event-loop threads own the connections; handler threads parse and validate requests
// and submit them to the engine; the engine's output events wake the connections that stream
// them. Nothing here touches the scheduler's state.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace serve8 {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;            // empty: no authentication
  std::string served_model_name;  // the name OpenAI routes answer to
  size_t max_request_bytes = 10u << 20;
  int max_queued_requests = 0;  // 503 beyond this many waiting requests; 0: unlimited
  double drain_seconds = 5.0;   // on shutdown, how long running requests may finish
  // The deadline for a request's headers (from when the connection waits for them), then for its
  // body, then for each write of its response: a client that trickles or stops reading is closed
  // and its requests abort.
  int http_timeout_seconds = 30;
  // /metrics answers without the API key unless this is set (Prometheus scrapers often have none).
  bool metrics_require_api_key = false;
  std::string version = "serve8";  // what /version answers (the CLI adds the build's commit)
  // Origins browsers may call from (CORS): their requests get Access-Control-Allow-Origin; "*"
  // allows any. Empty (the default): no CORS headers.
  std::vector<std::string> allowed_origins;
  // How tool calls are read from the output with tool_choice "auto" (--tool-call-parser: "qwen25",
  // "hermes", "llama3", "mistral", ...). Empty: the chat template's markup decides, else none.
  std::string tool_call_parser;
};

class HttpServer {
 public:
  // `engine` must be started and outlive the server; `engine_args` is reported by /get_server_info.
  HttpServer(Engine& engine, const EngineArgs& engine_args, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the port (throws Error when it cannot) and serves until shutdown() has run and every
  // handler has returned.
  void run();
  // Stops accepting connections, lets running requests finish for up to drain_seconds, then
  // aborts the rest through the engine. Safe to call from any thread, once run() is serving.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace serve8
