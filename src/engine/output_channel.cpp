#include "engine/output_channel.h"

namespace serve8 {

void RequestStream::push(const OutputEvent& ev) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(ev);
    listener = listener_;
  }
  cv_.notify_one();
  if (listener) listener();
}

void RequestStream::set_listener(std::function<void()> fn) {
  bool waiting = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    listener_ = fn;
    waiting = !events_.empty();
  }
  if (waiting && fn) fn();
}

std::optional<OutputEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  OutputEvent ev = std::move(events_.front());
  events_.pop_front();
  return ev;
}

void OutputDispatcher::start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void OutputDispatcher::stop() {
  flush();
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void OutputDispatcher::flush() {
  if (pending_.empty()) return;
  if (!thread_.joinable()) {
    deliver(pending_);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.empty()) {
      queue_.swap(pending_);
    } else {
      queue_.insert(queue_.end(), std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
      pending_.clear();
    }
  }
  cv_.notify_one();
}

void OutputDispatcher::deliver(Batch& batch) {
  for (auto& [stream, ev] : batch) stream->push(ev);
  batch.clear();
}

void OutputDispatcher::loop() {
  Batch batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping, and everything handed over is delivered
      batch.swap(queue_);
    }
    deliver(batch);
  }
}

}  // namespace serve8
