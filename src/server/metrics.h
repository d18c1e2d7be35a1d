// Server metrics in Prometheus' text format: the engine's gauges and counters (read from
// SchedulerStats when scraped) plus what only the HTTP layer sees: time to first token, inter-token
// latency, request latency, step time (from the engine's step observer), finished requests by
// reason. Each is exported under serve8's name and, where SGLang has one, under SGLang's
// (`sglang:...{model_name="..."}`) too, so SGLang's dashboards and sglang-router read serve8 as is.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace serve8 {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  // `n` observations of `value` at once (SGLang's inter-token latency: one interval spread over
  // the tokens that arrived together).
  void observe(double value, uint64_t n = 1);
  // Appends `name`_bucket/_sum/_count lines, with HELP and TYPE, to `out`; `labels` (`k="v",...`,
  // escaped) go on every line before `le`.
  void render(const std::string& name, const std::string& help, std::string& out, const std::string& labels = "") const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // The label value of SGLang's metrics: the served model name. Set before serving.
  void set_model_name(const std::string& name);

  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  // `interval` seconds since the request's previous output, which brought `new_tokens` tokens.
  void observe_inter_token(double interval, int new_tokens);
  void observe_e2e(double seconds) { e2e_.observe(seconds); }
  void observe_step(double seconds) { step_.observe(seconds); }
  void count_finished(FinishReason reason);
  void count_rejected() { rejected_++; }

  // The whole exposition: `stats` is a fresh engine snapshot, `in_flight` the generation requests
  // the HTTP layer is serving now.
  std::string render(const SchedulerStats& stats, int64_t in_flight) const;

 private:
  void render_sglang(const SchedulerStats& s, std::string& out) const;

  std::string model_label_;  // model_name="...", escaped
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram step_;
  std::atomic<uint64_t> finished_stop_{0}, finished_length_{0}, finished_abort_{0};
  std::atomic<uint64_t> rejected_{0};
};

}  // namespace serve8
