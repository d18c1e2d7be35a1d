#include "engine/logit_edits.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace serve8 {

void note_sampled(Request& r, int32_t token) {
  if (r.params.adjusts_logits()) ++r.output_counts[token];
}

void append_logit_edits(Request& r, int32_t row, const std::vector<int>& eos_ids, std::vector<LogitEdit>& out) {
  const SamplingParams& p = r.params;
  if (!p.adjusts_logits()) return;
  std::unordered_map<int32_t, LogitEdit> edits;
  const auto at = [&](int32_t token) -> LogitEdit& {
    auto [it, fresh] = edits.try_emplace(token);
    if (fresh) {
      it->second.row = row;
      it->second.token = token;
    }
    return it->second;
  };
  if (p.repetition_penalty != 1.0f) {
    if (r.prompt_tokens.empty() && !r.input_ids.empty()) {
      r.prompt_tokens = r.input_ids;
      std::sort(r.prompt_tokens.begin(), r.prompt_tokens.end());
      r.prompt_tokens.erase(std::unique(r.prompt_tokens.begin(), r.prompt_tokens.end()), r.prompt_tokens.end());
    }
    const auto repeat = [&](int32_t token) {
      LogitEdit& e = at(token);
      e.mul_pos = 1.0f / p.repetition_penalty;
      e.mul_neg = p.repetition_penalty;
    };
    for (int32_t t : r.prompt_tokens) repeat(t);
    for (const auto& [t, n] : r.output_counts) repeat(t);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [t, n] : r.output_counts)
      at(t).add -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
  }
  for (const auto& [t, bias] : p.logit_bias) at(t).add += bias;
  if (static_cast<int>(r.output_ids.size()) < p.min_new_tokens) {
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    if (!p.ignore_eos)
      for (int id : eos_ids) at(id).add = kNever;
    for (int id : p.stop_token_ids) at(id).add = kNever;
  }
  for (const auto& [t, e] : edits) out.push_back(e);
}

}  // namespace serve8
