// The way out of the scheduler: each request's RequestStream, and the OutputDispatcher that fills
// them from a thread of its own.
//
// Waking a waiting request thread costs a futex call, and hundreds of them a step would be host
// time the GPU waits for; so the scheduler only appends events (add) and hands the list over once
// per step (flush), and this thread wakes the streams while the GPU runs. One FIFO keeps order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace serve8 {

// One request's output channel: the dispatcher (or the scheduler) pushes, the request's thread pops.
class RequestStream {
 public:
  explicit RequestStream(std::string rid) : rid_(std::move(rid)) {}
  void push(const OutputEvent& ev);
  // Waits up to `timeout` for the next event; nullopt on timeout.
  std::optional<OutputEvent> next(std::chrono::milliseconds timeout);
  // Calls `fn` (on the pushing thread, without the lock) after every push, and at once if events
  // are waiting: how an event-driven reader learns there is something to take with next(0).
  void set_listener(std::function<void()> fn);
  const std::string& rid() const { return rid_; }

 private:
  std::string rid_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OutputEvent> events_;
  std::function<void()> listener_;
};

class OutputDispatcher {
 public:
  ~OutputDispatcher() { stop(); }
  // Starts the delivery thread; without it, flush() delivers on the calling thread.
  void start();
  // Delivers everything handed over, then joins the thread.
  void stop();
  // The scheduler thread's side: queue an event (no lock, no wake-up), then hand the queued
  // events over once per step.
  void add(const std::shared_ptr<RequestStream>& stream, const OutputEvent& ev) { pending_.emplace_back(stream, ev); }
  void flush();

 private:
  using Batch = std::vector<std::pair<std::shared_ptr<RequestStream>, OutputEvent>>;
  static void deliver(Batch& batch);
  void loop();

  Batch pending_;  // the scheduler thread's only
  std::mutex mu_;
  std::condition_variable cv_;
  Batch queue_;  // handed over, not yet delivered
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace serve8
