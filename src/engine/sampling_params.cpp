#include "engine/sampling_params.h"

#include <fmt/format.h>

#include <cmath>

namespace serve8 {

std::string SamplingParams::validate(int vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return fmt::format("temperature must be a finite number >= 0, got {}", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return fmt::format("top_p must be in (0, 1], got {}", top_p);
  if (top_k == 0 || top_k < -1) return fmt::format("top_k must be -1 (disabled) or >= 1, got {}", top_k);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return fmt::format("min_p must be in [0, 1], got {}", min_p);
  if (max_new_tokens < 0) return fmt::format("max_new_tokens must be >= 0, got {}", max_new_tokens);
  for (int id : stop_token_ids)
    if (id < 0 || id >= vocab_size)
      return fmt::format("stop_token_ids: {} is outside the vocabulary [0, {})", id, vocab_size);
  for (const auto& s : stop)
    if (s.empty()) return "stop strings must not be empty";
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 2.0f))
    return fmt::format("repetition_penalty must be in (0, 2], got {}", repetition_penalty);
  if (min_new_tokens < 0 || min_new_tokens > max_new_tokens)
    return fmt::format("min_new_tokens must be in [0, max_new_tokens = {}], got {}", max_new_tokens, min_new_tokens);
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size)
      return fmt::format("logit_bias: token {} is outside the vocabulary [0, {})", id, vocab_size);
    if (!(bias >= -100.0f && bias <= 100.0f))
      return fmt::format("logit_bias: the bias of token {} must be in [-100, 100], got {}", id, bias);
  }
  if (logprobs > kMaxTopLogprobs)
    return fmt::format("at most {} top log probabilities per token, got {}", kMaxTopLogprobs, logprobs);
  return "";
}

}  // namespace serve8
