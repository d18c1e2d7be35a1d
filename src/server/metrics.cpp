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

// `name{labels} value`, or `name value` without labels.
std::string sample(const char* name, const std::string& labels, double value) {
  if (labels.empty()) return fmt::format("{} {}\n", name, num(value));
  return fmt::format("{}{{{}}} {}\n", name, labels, num(value));
}

void gauge(std::string& out, const char* name, const char* help, double value, const std::string& labels = "") {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name) + sample(name, labels, value);
}

void counter(std::string& out, const char* name, const char* help, double value, const std::string& labels = "") {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name) + sample(name, labels, value);
}

// A label value as the text format wants it: backslash, double quote and newline escaped.
std::string escape_label_value(const std::string& v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, uint64_t n) {
  if (n == 0) return;
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lk(mu_);
  counts_[i] += n;
  sum_ += value * static_cast<double>(n);
  count_ += n;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out,
                       const std::string& labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  const std::string before_le = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, before_le, num(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, before_le, count_);
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, num(sum_), name, braces, count_);
}

Metrics::Metrics()
    : model_label_("model_name=\"\""),
      ttft_(latency_buckets()),
      itl_(latency_buckets()),
      e2e_(latency_buckets()),
      step_(latency_buckets()) {}

void Metrics::set_model_name(const std::string& name) {
  model_label_ = fmt::format("model_name=\"{}\"", escape_label_value(name));
}

void Metrics::observe_inter_token(double interval, int new_tokens) {
  if (new_tokens <= 0) return;
  itl_.observe(interval / new_tokens, static_cast<uint64_t>(new_tokens));
}

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
  gauge(out, "serve8_kv_slots_capacity", "KV pool slots (tokens) that requests can use.",
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
  itl_.render("serve8_inter_token_latency_seconds",
              "Time between a request's outputs, per token they brought (after the first).", out);
  e2e_.render("serve8_e2e_request_latency_seconds", "Time from request arrival to its last token.", out);
  step_.render("serve8_step_seconds", "Duration of one scheduler step (forward pass and sampling).", out);
  render_sglang(s, out);
  return out;
}

// SGLang's names (sglang/srt/metrics/collector.py), from the same counters and histograms as
// serve8's own, each labelled with the model. The colon is SGLang's choice: promtool's linter
// flags it ("metric names should not contain ':'"), though the exposition parses.
void Metrics::render_sglang(const SchedulerStats& s, std::string& out) const {
  const std::string& l = model_label_;
  // SGLang's "used" tokens are those requests hold: the radix cache's evictable ones are free.
  const auto held = static_cast<double>(std::max<int64_t>(0, s.slots_total - s.slots_free - s.slots_cached));
  const uint64_t aborted = finished_abort_.load();
  gauge(out, "sglang:num_running_reqs", "The number of running requests.", s.num_running, l);
  gauge(out, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", s.num_waiting, l);
  gauge(out, "sglang:num_used_tokens", "The number of KV tokens held by requests.", held, l);
  gauge(out, "sglang:token_usage", "The token usage: KV tokens held by requests / KV tokens in the pool.",
        s.slots_total > 0 ? held / static_cast<double>(s.slots_total) : 0.0, l);
  gauge(out, "sglang:cache_hit_rate", "The prefix cache hit rate (prompt tokens from the radix cache, since start).",
        s.radix_hit_rate, l);
  counter(out, "sglang:prompt_tokens_total", "Number of prefill tokens processed.",
          static_cast<double>(s.prompt_tokens), l);
  counter(out, "sglang:generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(s.generation_tokens), l);
  counter(out, "sglang:cached_tokens_total", "Number of cached prompt tokens.",
          static_cast<double>(s.cached_prompt_tokens), l);
  counter(out, "sglang:num_requests_total", "Number of requests processed.",
          static_cast<double>(finished_stop_.load() + finished_length_.load() + aborted), l);
  counter(out, "sglang:num_aborted_requests_total", "Number of requests aborted.", static_cast<double>(aborted), l);
  ttft_.render("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", out, l);
  itl_.render("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", out, l);
  e2e_.render("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", out, l);
}

}  // namespace serve8
