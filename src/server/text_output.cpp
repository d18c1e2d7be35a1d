#include "server/text_output.h"

#include <algorithm>

#include "core/error.h"

namespace serve8 {

TextOutput::TextOutput(const Tokenizer* tokenizer, const SamplingParams& params, std::span<const int32_t> prompt)
    : stops_(params.stop) {
  if (tokenizer) detok_ = std::make_unique<IncrementalDetokenizer>(*tokenizer, params.skip_special_tokens, prompt);
}

void TextOutput::apply(const OutputEvent& ev) {
  if (finished_) return;
  num_events_++;
  prompt_tokens_ = ev.prompt_tokens;
  completion_tokens_ = ev.completion_tokens;
  cached_tokens_ = ev.cached_tokens;
  logprobs_.insert(logprobs_.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (!ev.prompt_logprobs.empty()) prompt_logprobs_ = ev.prompt_logprobs;
  // The token that matched a stop condition arrives with the finishing event; it is an output id
  // but not text. The scheduler reports it as its decimal id; a stop string is never confused with
  // it because only the request's own stop strings can be matched as strings.
  const bool token_stop = ev.finished && ev.reason == FinishReason::kStop && !ev.new_ids.empty() &&
                          ev.matched_stop == std::to_string(ev.new_ids.back()) &&
                          std::find(stops_.begin(), stops_.end(), ev.matched_stop) == stops_.end();
  for (size_t i = 0; i < ev.new_ids.size(); ++i) {
    const int32_t id = ev.new_ids[i];
    ids_.push_back(id);
    if (!detok_ || (token_stop && i + 1 == ev.new_ids.size())) continue;
    try {
      text_ += detok_->push(id);
    } catch (const Error&) {
      // An id the tokenizer cannot decode (a model vocabulary larger than the tokenizer's) has no
      // text; the ids still reach the client.
    }
  }
  if (token_stop) matched_token_ = ev.new_ids.back();
  if (ev.finished) {
    finish(ev);
    return;
  }
  visible_ = std::max(visible_, text_.size() - stop_prefix_tail());
}

void TextOutput::finish(const OutputEvent& ev) {
  finished_ = true;
  reason_ = ev.reason;
  error_ = ev.error;
  if (detok_) text_ += detok_->flush();
  if (ev.reason == FinishReason::kStop && matched_token_ < 0 && !ev.matched_stop.empty()) {
    matched_string_ = ev.matched_stop;
    // The first occurrence is the one that stopped the request: an earlier one would have stopped
    // it earlier. Text already streamed never contains it (stop_prefix_tail held it back).
    const size_t at = text_.find(matched_string_);
    if (at != std::string::npos) text_.resize(std::max(at, sent_));
  }
  visible_ = text_.size();
}

size_t TextOutput::stop_prefix_tail() const {
  // The longest suffix of the text that is a proper prefix of a stop string: it may yet become one.
  size_t longest = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text_.size());
    for (size_t len = max_len; len > longest; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

std::string TextOutput::take_delta() {
  if (visible_ <= sent_) return "";
  std::string delta = text_.substr(sent_, visible_ - sent_);
  sent_ = visible_;
  return delta;
}

}  // namespace serve8
