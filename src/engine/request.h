// Request: one generation request as the scheduler tracks it, and the events it sends back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/sampling_params.h"
#include "kv/radix_cache.h"
#include "tokenizer/incremental_detokenizer.h"

namespace serve8 {

enum class FinishReason { kNone, kStop, kLength, kAbort };
std::string finish_reason_name(FinishReason r);  // "", "stop", "length", "abort"

// What the scheduler reports for a request after a step that touched it. Sent on the scheduler
// thread; the receiver copies it into its own channel.
struct OutputEvent {
  std::vector<int32_t> new_ids;  // tokens sampled this step (0 or 1)
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string matched_stop;  // the stop string, or the stop token id as text
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  std::string error;  // set when the request was rejected (reason kAbort)
  std::vector<RowLogprobs> logprobs;  // one per new id when the request asked (params.logprobs >= 0)
  // Prompt tokens [params.prompt_logprobs_start, n), once, with the first new id.
  std::vector<RowLogprobs> prompt_logprobs;
};

using OutputSink = std::function<void(const OutputEvent&)>;

using Clock = std::chrono::steady_clock;

struct Request {
  std::string rid;
  std::vector<int32_t> input_ids;
  SamplingParams params;
  uint64_t seed = 0;
  OutputSink sink;
  Clock::time_point arrival{};

  // Progress, owned by the scheduler.
  std::vector<int32_t> output_ids;
  std::vector<int32_t> slots;   // KV slots of the first num_computed tokens of input+output
  int num_computed = 0;         // tokens whose K/V are in the pool
  int prefix_len = 0;           // leading slots owned by the radix cache (locked through `node`)
  int cached_tokens = 0;        // prompt tokens served from the radix cache (first admission)
  RadixCache::NodeHandle node;  // radix node locked by this request (the root: none)
  int table_row = -1;           // row of the KV cache's request -> slot table while admitted
  bool admitted_before = false;
  FinishReason finish = FinishReason::kNone;
  std::string matched_stop;
  std::unique_ptr<IncrementalDetokenizer> stop_detok;  // only when stop strings are set
  std::string stop_text;                               // text so far, for stop strings
  // Penalized requests only (params.adjusts_logits()): occurrences of each generated token, and
  // the prompt's distinct tokens (repetition_penalty), kept as tokens are sampled.
  std::unordered_map<int32_t, int32_t> output_counts;
  std::vector<int32_t> prompt_tokens;
  // Prompt log probabilities as the prefill chunks compute them, until sent with the first token.
  std::vector<RowLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  bool wants_prompt_logprobs() const { return params.prompt_logprobs_start >= 0 && !prompt_logprobs_sent; }
  // Constrained requests only: where the output stands in params.compiled_grammar.
  std::unique_ptr<GrammarMatcher> grammar;
  int32_t grammar_pending = -1;  // drawn, not yet accepted by `grammar` (the next step does it)

  int total_len() const { return static_cast<int>(input_ids.size() + output_ids.size()); }
  int32_t token_at(int i) const {
    const int n = static_cast<int>(input_ids.size());
    return i < n ? input_ids[static_cast<size_t>(i)] : output_ids[static_cast<size_t>(i - n)];
  }
};

}  // namespace serve8
