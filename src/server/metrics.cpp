#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace serve8 {

namespace {

// Buckets from 1 ms to 2 minutes: CPU steps of a tiny model take ~1 ms, a queued request's TTFT
// can take minutes.
std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

// Prometheus writes numbers as Go's strconv does; fmt's shortest round-trip form is compatible.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

void gauge(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, num(value));
}

void counter(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, num(value));
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lk(mu_);
  counts_[i]++;
  sum_ += value;
  count_++;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, num(sum_), name, count_);
}

Metrics::Metrics() : ttft_(latency_buckets()), e2e_(latency_buckets()), step_(latency_buckets()) {}

void Metrics::count_finished(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      finished_stop_++;
      break;
    case FinishReason::kLength:
      finished_length_++;
      break;
    case FinishReason::kAbort:
      finished_abort_++;
      break;
    case FinishReason::kNone:
      break;
  }
}

std::string Metrics::render(const SchedulerStats& s, int64_t in_flight) const {
  std::string out;
  gauge(out, "serve8_num_running_requests", "Requests in the running batch.", s.num_running);
  gauge(out, "serve8_num_queued_requests", "Requests waiting for admission.", s.num_waiting);
  gauge(out, "serve8_num_http_requests_in_flight", "Generation requests the HTTP layer is serving.",
        static_cast<double>(in_flight));
  gauge(out, "serve8_kv_slots_total", "KV pool slots (tokens) that requests can use.",
        static_cast<double>(s.slots_total));
  gauge(out, "serve8_kv_slots_free", "KV slots in the free list.", static_cast<double>(s.slots_free));
  gauge(out, "serve8_kv_slots_used", "KV slots held by requests or the radix cache.",
        static_cast<double>(s.slots_total - s.slots_free));
  gauge(out, "serve8_kv_slots_cached", "KV slots held only by the radix cache (evictable).",
        static_cast<double>(s.slots_cached));
  gauge(
      out, "serve8_kv_usage_ratio", "Fraction of KV slots in use.",
      s.slots_total > 0 ? static_cast<double>(s.slots_total - s.slots_free) / static_cast<double>(s.slots_total) : 0.0);
  gauge(out, "serve8_radix_cache_hit_rate", "Prompt tokens served from the radix cache / prompt tokens looked up.",
        s.radix_hit_rate);
  counter(out, "serve8_prompt_tokens_total", "Prompt tokens admitted.", static_cast<double>(s.prompt_tokens));
  counter(out, "serve8_cached_prompt_tokens_total", "Prompt tokens served from the radix cache.",
          static_cast<double>(s.cached_prompt_tokens));
  counter(out, "serve8_generation_tokens_total", "Tokens generated.", static_cast<double>(s.generation_tokens));
  counter(out, "serve8_retractions_total", "Requests retracted to free KV slots.",
          static_cast<double>(s.num_retractions));
  counter(out, "serve8_steps_total", "Scheduler steps run.", static_cast<double>(s.num_steps));
  out += "# HELP serve8_requests_finished_total Generation requests finished, by finish reason.\n";
  out += "# TYPE serve8_requests_finished_total counter\n";
  out += fmt::format("serve8_requests_finished_total{{reason=\"stop\"}} {}\n", finished_stop_.load());
  out += fmt::format("serve8_requests_finished_total{{reason=\"length\"}} {}\n", finished_length_.load());
  out += fmt::format("serve8_requests_finished_total{{reason=\"abort\"}} {}\n", finished_abort_.load());
  counter(out, "serve8_requests_rejected_total", "Requests refused with a 4xx or 5xx status.",
          static_cast<double>(rejected_.load()));
  ttft_.render("serve8_time_to_first_token_seconds", "Time from request arrival to its first token.", out);
  e2e_.render("serve8_e2e_request_latency_seconds", "Time from request arrival to its last token.", out);
  step_.render("serve8_step_seconds", "Duration of one scheduler step (forward pass and sampling).", out);
  return out;
}

}  // namespace serve8
