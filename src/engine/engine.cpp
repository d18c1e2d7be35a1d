#include "engine/engine.h"

#include <future>

#include "core/error.h"
#include "core/log.h"

namespace serve8 {

Engine::Engine(std::unique_ptr<Backend> backend, std::unique_ptr<LlamaModel> model, std::unique_ptr<KvCache> kv,
               std::unique_ptr<Tokenizer> tokenizer, const SchedulerConfig& config)
    : backend_(std::move(backend)), model_(std::move(model)), kv_(std::move(kv)), tokenizer_(std::move(tokenizer)) {
  scheduler_ = std::make_unique<Scheduler>(config, *model_, *kv_, tokenizer_.get());
  stats_ = scheduler_->stats();
}

Engine::~Engine() { shutdown(false); }

void Engine::start() {
  SERVE8_CHECK(!thread_.joinable(), "engine: already started");
  outputs_.start();
  thread_ = std::thread([this] { loop(); });
}

void Engine::shutdown(bool drain) {
  accepting_ = false;
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    drain_ = drain;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  outputs_.stop();
}

std::shared_ptr<RequestStream> Engine::submit(std::vector<int32_t> input_ids, const SamplingParams& params,
                                              std::string rid) {
  const uint64_t n = next_id_++;
  auto stream = std::make_shared<RequestStream>(rid.empty() ? fmt::format("req-{}", n) : std::move(rid));
  auto req = std::make_shared<std::unique_ptr<Request>>(std::make_unique<Request>());
  Request& r = **req;
  r.rid = stream->rid();
  r.input_ids = std::move(input_ids);
  r.params = params;
  r.seed = 0x5eed0000ull + n;  // a request without a seed still samples reproducibly
  r.arrival = Clock::now();
  // Called on the scheduler thread only (or run_until_idle's caller): queued, delivered at the next flush.
  r.sink = [this, stream](const OutputEvent& ev) { outputs_.add(stream, ev); };
  if (!accepting_) {
    OutputEvent ev;
    ev.finished = true;
    ev.reason = FinishReason::kAbort;
    ev.error = "the server is shutting down";
    stream->push(ev);
    return stream;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.push_back([this, req] { scheduler_->add_request(std::move(*req)); });
  }
  cv_.notify_one();
  return stream;
}

void Engine::abort(const std::string& rid) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.push_back([this, rid] { scheduler_->abort(rid); });
  }
  cv_.notify_one();
}

bool Engine::flush_cache() {
  if (!thread_.joinable()) return scheduler_->flush_cache();
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> result = done->get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox_.push_back([this, done] { done->set_value(scheduler_->flush_cache()); });
  }
  cv_.notify_one();
  return result.get();
}

SchedulerStats Engine::stats() const {
  if (!thread_.joinable()) return scheduler_->stats();
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Engine::run_until_idle() {
  SERVE8_CHECK(!thread_.joinable(), "engine: run_until_idle() is for engines without a thread");
  drain_inbox();
  while (scheduler_->has_work()) {
    scheduler_->step();
    outputs_.flush();
    drain_inbox();
  }
}

void Engine::drain_inbox() {
  std::deque<std::function<void()>> items;
  {
    std::lock_guard<std::mutex> lk(mu_);
    items.swap(inbox_);
  }
  for (auto& f : items) f();
  outputs_.flush();
}

void Engine::loop() {
  for (;;) {
    drain_inbox();
    {
      // Aborts and flushes change the pool without a step; publish them so an idle engine's
      // stats are current (a server checks that every slot came back).
      const SchedulerStats s = scheduler_->stats();
      std::lock_guard<std::mutex> lk(mu_);
      stats_ = s;
    }
    if (stop_ && (!drain_ || !scheduler_->has_work())) break;
    if (!scheduler_->has_work()) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !inbox_.empty() || stop_.load(); });
      continue;
    }
    try {
      scheduler_->step();
    } catch (const std::exception& e) {
      // A failing step must not take the server down silently: log it and stop the engine.
      spdlog::critical("scheduler step failed: {}", e.what());
      throw;
    }
    outputs_.flush();
    const SchedulerStats s = scheduler_->stats();
    if (step_observer_ && s.num_steps != stats_.num_steps) step_observer_(s.last_step_seconds);
    std::lock_guard<std::mutex> lk(mu_);
    stats_ = s;
  }
  // Not draining: abort whatever is left so every waiting client gets an answer.
  drain_inbox();
  scheduler_->abort_all();
  outputs_.flush();
  std::lock_guard<std::mutex> lk(mu_);
  stats_ = scheduler_->stats();
}

}  // namespace serve8
