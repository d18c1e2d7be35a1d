// Delivery of generation output over HTTP: server-sent events for streams, a deferred JSON body
// otherwise. Both answer through httplib's chunked content provider, which runs after the status
// line is sent and lets a handler notice a client that went away (DataSink::is_writable peeks at
// the socket) and abort its requests, so their KV slots come back.
#include <httplib.h>

#include "core/log.h"
#include "server/generation.h"
#include "server/json_params.h"
#include "server/routes.h"

namespace serve8 {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr auto kLivenessInterval = std::chrono::milliseconds(50);
// How long a handler waits for the engine to accept or refuse a request before committing to 200.
constexpr auto kStartTimeout = std::chrono::milliseconds(2000);

std::string sse_event(const std::string& payload) { return "data: " + payload + "\n\n"; }

// The first request of the run that the engine refused, if any.
const TextOutput* first_error(GenerationRun& run) {
  for (size_t i = 0; i < run.size(); ++i)
    if (!run.output(i).error().empty()) return &run.output(i);
  return nullptr;
}

// Runs `run` to the end, calling `on_change` as output arrives. Returns false when the client went
// away (or a write failed); the run is then aborted.
bool pump(GenerationRun& run, httplib::DataSink& sink,
          const std::function<bool(const std::vector<size_t>&)>& on_change) {
  auto last_check = Clock::now();
  // Poll before testing for the end: a request that finished while the response was being set
  // up (await_start drained its events) still has its output to send.
  for (;;) {
    const std::vector<size_t> changed = run.poll(kPollInterval);
    if (!changed.empty() && !on_change(changed)) {
      run.abort();
      return false;
    }
    if (run.all_finished()) break;
    if (Clock::now() - last_check >= kLivenessInterval) {
      last_check = Clock::now();
      if (!sink.is_writable()) {
        spdlog::info("client disconnected; aborting {} request(s) starting with {}", run.size(), run.rid(0));
        run.abort();
        return false;
      }
    }
  }
  return true;
}

}  // namespace

void send_json(httplib::Response& res, const std::string& body, int status) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, error_body(e), e.status()); }

void respond_with_run(httplib::Response& res, std::shared_ptr<GenerationRun> run, const StreamFormat* format,
                      std::function<std::string(GenerationRun& run)> body) {
  if (std::optional<ApiError> err = run->await_start(kStartTimeout)) throw *err;
  if (format != nullptr) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider("text/event-stream", [run, f = *format](size_t, httplib::DataSink& sink) {
      // Nothing may escape a content provider: httplib runs it outside its exception handler.
      try {
        std::vector<std::string> payloads;
        auto flush = [&] {
          for (const std::string& p : payloads)
            if (!sink.write(p.data(), p.size())) return false;
          payloads.clear();
          return true;
        };
        bool errored = false;
        const bool ok = pump(*run, sink, [&](const std::vector<size_t>& changed) {
          for (size_t i : changed) {
            const TextOutput& out = run->output(i);
            if (out.error().empty()) continue;
            // The engine refused a request after the stream started: say why, then end it.
            payloads.push_back(sse_event(error_body(invalid_request(out.error()))));
            errored = true;
            return false;
          }
          std::vector<std::string> chunks;
          f.on_change(*run, changed, chunks);
          for (const std::string& c : chunks) payloads.push_back(sse_event(c));
          return flush();
        });
        if (!ok && !errored) return false;
        if (ok && f.on_end) {
          std::vector<std::string> chunks;
          f.on_end(*run, chunks);
          for (const std::string& c : chunks) payloads.push_back(sse_event(c));
        }
        payloads.emplace_back("data: [DONE]\n\n");
        if (!flush()) return false;
        sink.done();
        return true;
      } catch (const std::exception& e) {
        spdlog::error("stream of request {} failed: {}", run->rid(0), e.what());
        run->abort();
        return false;
      }
    });
    return;
  }
  res.set_chunked_content_provider("application/json", [run, body](size_t, httplib::DataSink& sink) {
    try {
      if (!pump(*run, sink, [](const std::vector<size_t>&) { return true; })) return false;
      const TextOutput* err = first_error(*run);
      const std::string text = err ? error_body(invalid_request(err->error())) : body(*run);
      if (!sink.write(text.data(), text.size())) return false;
      sink.done();
      return true;
    } catch (const std::exception& e) {
      spdlog::error("response of request {} failed: {}", run->rid(0), e.what());
      run->abort();
      return false;
    }
  });
}

}  // namespace serve8
