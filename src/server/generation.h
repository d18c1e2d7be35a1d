// GenerationRun: the prompts of one HTTP request (one, or a batch) on their way through the engine.
// It submits them, gathers their OutputEvents into TextOutputs, records TTFT and latency, and
// aborts whatever has not finished when it is destroyed (a client gone, an error, shutdown), so no
// request outlives its HTTP exchange holding KV slots.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/server_context.h"
#include "server/text_output.h"

namespace serve8 {

// One prompt, parsed and ready for the engine.
struct GenerationInput {
  std::vector<int32_t> input_ids;
  SamplingParams params;
  bool max_new_tokens_given = false;  // else the default is clamped to the context left
  std::string rid;                    // empty: a fresh id
};

// Checks a prompt and its parameters against the model before anything is submitted, as the
// scheduler would reject them (so the client gets a 400 rather than an aborted stream).
// `prompt_param` and `max_param` name the prompt and max-tokens fields in errors.
void check_generation_input(const ServerContext& ctx, GenerationInput& in, const std::string& prompt_param,
                            const std::string& max_param);

class GenerationRun {
 public:
  // Throws ApiError (503) when the server is draining or its queue is full, (400) when a rid is
  // already in use. share_prefill (OpenAI's n > 1: one prompt, several choices): the prompt is
  // prefilled once by a one-token request, and the choices start after it, from the radix cache.
  GenerationRun(ServerContext& ctx, std::vector<GenerationInput> inputs, Clock::time_point received,
                bool share_prefill = false);
  ~GenerationRun();
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  size_t size() const { return outputs_.size(); }
  TextOutput& output(size_t i) { return *outputs_[i]; }
  const TextOutput& output(size_t i) const { return *outputs_[i]; }
  const std::string& rid(size_t i) const { return rids_[i]; }
  const std::vector<int32_t>& input_ids(size_t i) const { return inputs_[i].input_ids; }
  // Seconds from arrival to the finishing event of request i (0 while it runs).
  double e2e_seconds(size_t i) const { return e2e_[i]; }
  bool all_finished() const { return num_finished_ == outputs_.size(); }

  // Waits up to `timeout` for output; returns the indexes of the requests that changed.
  std::vector<size_t> poll(std::chrono::milliseconds timeout);
  // Takes what arrived; an error once a request was refused, else nothing. An engine refusal
  // arrives as a request's first event, so a caller that waits for started() (every request has
  // its first event) can still answer with an error status instead of 200.
  std::optional<ApiError> check_start();
  bool started() const;
  // Calls `wake` (on the engine's delivery thread) whenever output arrives for one of the run's
  // requests: an event-driven reader's cue to poll(0).
  void on_output(const std::function<void()>& wake);
  void abort();

 private:
  void apply_event(size_t i, const OutputEvent& ev);
  bool drain_events(size_t i);
  // The shared prefill finished (or failed): submit the choices.
  void take_warmup(std::chrono::milliseconds wait);
  void submit(size_t i);

  ServerContext& ctx_;
  std::vector<GenerationInput> inputs_;
  std::vector<std::string> rids_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<std::unique_ptr<TextOutput>> outputs_;
  std::vector<double> e2e_;
  std::vector<double> last_token_;      // seconds from arrival to the latest output with tokens
  std::vector<size_t> changed_before_;  // changes seen by await_start, reported by the next poll
  Clock::time_point received_;
  size_t num_finished_ = 0;
  std::vector<bool> aborted_;  // abort sent to the engine
  std::shared_ptr<RequestStream> warmup_;  // the shared prefill while it runs
  std::string warmup_rid_;
  std::function<void()> wake_;
  bool cancelled_ = false;
};

}  // namespace serve8
