// Delivery of generation output over HTTP: server-sent events for streams, a JSON body once every
// request finished otherwise. Both are deferred responses: the connection asks for what is ready
// when the engine's delivery thread wakes it, so no thread waits for a stream.
#include "core/log.h"
#include "server/generation.h"
#include "server/json_params.h"
#include "server/routes.h"

namespace serve8 {

namespace {

// How long the status line waits for the engine to accept or refuse every request: a refusal
// that comes in time is answered with its error status, a later one inside the 200's body.
constexpr auto kStartTimeout = std::chrono::milliseconds(2000);

std::string sse_event(const std::string& payload) { return "data: " + payload + "\n\n"; }

// The first request of the run that the engine refused, if any.
const TextOutput* first_error(GenerationRun& run) {
  for (size_t i = 0; i < run.size(); ++i)
    if (!run.output(i).error().empty()) return &run.output(i);
  return nullptr;
}

class RunResponse final : public DeferredResponse {
 public:
  RunResponse(std::shared_ptr<GenerationRun> run, const StreamFormat* format,
              std::function<std::string(GenerationRun& run)> body)
      : run_(std::move(run)), body_(std::move(body)) {
    if (format) format_ = *format;
  }

  void start(std::function<void()> wake) override {
    start_deadline_ = Clock::now() + kStartTimeout;
    run_->on_output(wake);
  }

  Piece next() override {
    Piece p;
    if (!head_sent_) {
      if (std::optional<ApiError> err = run_->check_start()) return error_piece(*err);
      if (!run_->started() && Clock::now() < start_deadline_) return p;
      head_sent_ = true;
      if (format_) p.head = Head{200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}, true};
    }
    if (!format_) {
      run_->poll(std::chrono::milliseconds(0));
      if (!run_->all_finished()) return p;
      if (const TextOutput* err = first_error(*run_)) return error_piece(invalid_request(err->error()));
      p.head = Head{200, "application/json", {}, false};
      p.data = body_(*run_);
      p.done = true;
      return p;
    }
    const std::vector<size_t> changed = run_->poll(std::chrono::milliseconds(0));
    for (size_t i : changed) {
      const TextOutput& out = run_->output(i);
      if (out.error().empty()) continue;
      // The engine refused a request after the stream started: say why, then end it.
      p.data += sse_event(error_body(invalid_request(out.error())));
      p.data += "data: [DONE]\n\n";
      p.done = true;
      run_->abort();
      return p;
    }
    std::vector<std::string> chunks;
    if (!changed.empty()) format_->on_change(*run_, changed, chunks);
    if (run_->all_finished() && format_->on_end) format_->on_end(*run_, chunks);
    for (const std::string& c : chunks) p.data += format_->whole_events ? c : sse_event(c);
    if (run_->all_finished()) {
      if (!format_->whole_events) p.data += "data: [DONE]\n\n";
      p.done = true;
    }
    return p;
  }

  void cancel() override {
    if (!run_->all_finished())
      spdlog::info("client gone; aborting {} request(s) starting with {}", run_->size(), run_->rid(0));
    run_->abort();
  }

 private:
  Piece error_piece(const ApiError& e) {
    run_->abort();
    Piece p;
    if (!head_sent_) p.head = Head{e.status(), "application/json", {}, false};
    p.data = head_sent_ ? sse_event(error_body(e)) + "data: [DONE]\n\n" : error_body(e);
    p.done = true;
    head_sent_ = true;
    return p;
  }

  std::shared_ptr<GenerationRun> run_;
  std::optional<StreamFormat> format_;
  std::function<std::string(GenerationRun& run)> body_;
  Clock::time_point start_deadline_{};
  bool head_sent_ = false;
};

}  // namespace

void send_json(HttpResponse& res, const std::string& body, int status) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(HttpResponse& res, const ApiError& e) { send_json(res, error_body(e), e.status()); }

void respond_with_run(HttpResponse& res, std::shared_ptr<GenerationRun> run, const StreamFormat* format,
                      std::function<std::string(GenerationRun& run)> body) {
  res.deferred = std::make_shared<RunResponse>(std::move(run), format, std::move(body));
}

}  // namespace serve8
