// TextOutput: one request's output as a client sees it, built from the engine's OutputEvents.
//
// Tokens are detokenized incrementally (whole UTF-8 characters only). The scheduler finishes a
// request when a stop string appears in its text; here the text is cut where the stop string
// starts (the stop string itself is not returned, as OpenAI's API does), and while the request
// runs, any tail that could still grow into a stop string is held back, so a streamed prefix never
// has to be taken back. A matched stop token is counted in output_ids but not rendered as text.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/incremental_detokenizer.h"

namespace serve8 {

class TextOutput {
 public:
  // `tokenizer` may be null (ids only: text stays empty). The tail of `prompt` conditions the
  // spacing of the first generated piece.
  TextOutput(const Tokenizer* tokenizer, const SamplingParams& params, std::span<const int32_t> prompt);

  void apply(const OutputEvent& ev);

  // The text that is final so far (all of it once finished); grows monotonically.
  std::string_view visible_text() const { return std::string_view(text_).substr(0, visible_); }
  // What became visible since the last call.
  std::string take_delta();

  const std::vector<int32_t>& output_ids() const { return ids_; }
  // One per output id when the request asked for log probabilities, else empty.
  const std::vector<RowLogprobs>& logprobs() const { return logprobs_; }
  // The prompt's tokens from params.prompt_logprobs_start on, once the first output id came.
  const std::vector<RowLogprobs>& prompt_logprobs() const { return prompt_logprobs_; }
  bool finished() const { return finished_; }
  FinishReason reason() const { return reason_; }
  const std::string& error() const { return error_; }
  // The stop that ended the request: a token (matched_token_id() >= 0) or a string.
  int32_t matched_token_id() const { return matched_token_; }
  const std::string& matched_string() const { return matched_string_; }
  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const { return completion_tokens_; }
  int cached_tokens() const { return cached_tokens_; }
  int num_events() const { return num_events_; }

 private:
  void finish(const OutputEvent& ev);
  size_t stop_prefix_tail() const;

  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::vector<std::string> stops_;
  std::vector<int32_t> ids_;
  std::vector<RowLogprobs> logprobs_;
  std::vector<RowLogprobs> prompt_logprobs_;
  std::string text_;
  size_t visible_ = 0;
  size_t sent_ = 0;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::kNone;
  std::string error_;
  int32_t matched_token_ = -1;
  std::string matched_string_;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  int cached_tokens_ = 0;
  int num_events_ = 0;
};

}  // namespace serve8
