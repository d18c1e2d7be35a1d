// Scheduler: continuous batching over one model, one KV pool and one radix cache.
//
// step() is three calls, as nano-vllm's: schedule() picks the rows of this step (decode rows of
// running requests first, then prefill chunks of waiting ones under the token budget), run()
// executes them as one ForwardBatch, postprocess() appends sampled tokens, finishes requests and
// returns their slots. Only the scheduler thread calls it; the Engine (engine.h) feeds it.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/request.h"
#include "kv/radix_cache.h"
#include "kv/req_to_token.h"
#include "kv/slot_allocator.h"
#include "model/llama.h"

namespace serve8 {

class Tokenizer;

struct SchedulerConfig {
  int max_running_requests = 64;
  int chunked_prefill_size = 2048;  // most prompt tokens one request adds in one step
  int max_prefill_tokens = 8192;    // most prompt tokens in one step, all requests together
  int context_length = 4096;        // prompt + output
  bool disable_radix_cache = false;
  int grammar_threads = 0;  // threads filling constrained requests' masks (0: one per hardware thread)
  // SGLang's --schedule-conservativeness: admission keeps room for the tokens running requests
  // will still decode, max_new_tokens left times a ratio that starts at 0.7 x this (at most 1),
  // falls to 0.14 of that over 600 steps that decode and rises again after a retraction. 0: room
  // for one more token each.
  double schedule_conservativeness = 1.0;
};

// Counters over a set of steps since start: the decode-only ones, or those with prompt tokens.
struct StepCounters {
  int64_t steps = 0;
  double seconds = 0.0;       // from scheduling to sampled ids (the host waits for the device there)
  double host_seconds = 0.0;  // of which the host's own work: scheduling, batch building, bookkeeping
  int64_t kv_tokens = 0;      // KV tokens their attention read
  int64_t prompt_tokens = 0;  // computed, recomputed ones of retracted requests included
  int64_t decode_rows = 0;

  void add(double step_seconds, double step_host_seconds, int64_t step_kv_tokens, int64_t step_prompt_tokens,
           int64_t step_decode_rows) {
    steps++;
    seconds += step_seconds;
    host_seconds += step_host_seconds;
    kv_tokens += step_kv_tokens;
    prompt_tokens += step_prompt_tokens;
    decode_rows += step_decode_rows;
  }
};

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;
  int64_t slots_total = 0;
  int64_t slots_free = 0;     // free in the allocator
  int64_t slots_cached = 0;   // held by the radix cache, evictable
  int64_t prompt_tokens = 0;  // counters since start
  int64_t generation_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t num_retractions = 0;
  int64_t num_finished = 0;
  int64_t num_steps = 0;
  double radix_hit_rate = 0.0;
  int peak_running = 0;
  double last_step_seconds = 0.0;
  // Steps whose rows all decode (with the weight bytes and the KV bytes per token these give the
  // decode step's model-bandwidth utilization), and those of at least kLargeDecodeBatch rows (the
  // seed experiment's goal is the MBU at batch >= 64).
  static constexpr int kLargeDecodeBatch = 64;
  StepCounters decode;
  StepCounters large_decode;
  StepCounters prefill;  // steps with prompt tokens (a prefill, or prompt chunks beside decode rows)
};

class Scheduler {
 public:
  // tokenizer may be null (ids in, ids out; stop strings then cannot be used).
  Scheduler(const SchedulerConfig& config, LlamaModel& model, KvCache& kv, const Tokenizer* tokenizer);
  ~Scheduler();

  // Validates and queues a request; a request that can never run (too long, bad parameters) is
  // finished at once with an error event instead.
  void add_request(std::unique_ptr<Request> request);
  // Aborts a queued or running request (its sink gets a finished event); false if unknown.
  bool abort(const std::string& rid);
  void abort_all();
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Runs one step; returns the number of tokens it computed (0 when idle).
  int step();
  // Drops the radix cache; false while any request runs or waits.
  bool flush_cache();

  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }

  // Checks that every slot is in exactly one place (free, tree, a request); tests call it.
  void check_invariants() const;

 private:
  struct Row {
    Request* req;
    int q_len;
    bool samples;  // the row's last token ends the known sequence: its logits pick the next token
  };

  std::vector<Row> schedule();
  Tensor run(const std::vector<Row>& rows);
  void postprocess(const std::vector<Row>& rows, const Tensor& logits);

  bool try_allocate(int64_t n, std::vector<int32_t>& out);
  // Slots kept for the tokens r will still decode, at the current ratio (at least one), and with
  // its prompt tokens not yet given slots (a running request's chunks to come).
  int64_t decode_reserve(const Request& r) const;
  int64_t pending_tokens(const Request& r) const;
  bool admit(Request& r, int64_t reserved);
  void retract_newest();
  void release(Request& r, bool keep_in_cache);
  void finish(Request& r, FinishReason reason);
  bool check_stop(Request& r, int32_t token);
  // Prompt log probabilities of the rows' prefill chunks, from the hidden states `run` left.
  void prompt_logprobs(const std::vector<Row>& rows);
  void emit(Request& r, std::vector<int32_t> new_ids, const RowLogprobs* logprobs = nullptr);

  SchedulerConfig config_;
  LlamaModel& model_;
  KvCache& kv_;
  const Tokenizer* tokenizer_;
  SlotAllocator slots_;
  ReqToTokenTable table_;
  RadixCache radix_;
  std::vector<int> eos_ids_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;  // in admission order
  SchedulerStats counters_;
  ForwardBatch batch_;
  std::vector<int32_t> tokens_;  // one row's new tokens, while the batch is built
  std::vector<int32_t> sampled_;
  std::vector<LogitEdit> edits_;                 // this step's penalties and biases, for edit_logits
  std::vector<int32_t> mask_rows_, mask_words_;  // this step's grammar masks, for mask_logits
  std::vector<GrammarMatcher*> mask_matchers_;
  std::vector<Request*> mask_requests_;
  std::unique_ptr<GrammarMaskFiller> mask_filler_;  // made on the first constrained step
  // The decode reservation's ratio now, where it starts and ends, and its fall per step that decodes.
  double new_token_ratio_ = 0.0, ratio_init_ = 0.0, ratio_min_ = 0.0, ratio_decay_ = 0.0;
  // From the forward's launch to the sampled ids on the host: the device's part of the last step.
  Clock::time_point forward_start_{};
  double last_device_seconds_ = 0.0;
};

}  // namespace serve8
