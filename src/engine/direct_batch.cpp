#include "engine/direct_batch.h"

#include <algorithm>

#include "core/error.h"

namespace serve8 {

std::vector<int32_t> first_slots(int n, int capacity, const KvCache& kv) {
  const KvCacheConfig& c = kv.config();
  const int64_t need = 1 + int64_t{n} * capacity;
  SERVE8_CHECK(need <= kv.config().num_slots,
               "{} sequences of {} tokens need {} KV slots, the pool has {} (raise --max-total-tokens or "
               "--mem-fraction-static)",
               n, capacity, need - 1, kv.config().num_slots - 1);
  SERVE8_CHECK(n <= c.max_requests && capacity <= c.max_context_len,
               "{} sequences of {} tokens do not fit the KV cache's request table ({} rows of {} tokens: raise "
               "--max-running-requests or --context-length)",
               n, capacity, c.max_requests, c.max_context_len);
  std::vector<int32_t> first(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) first[static_cast<size_t>(i)] = 1 + i * capacity;
  return first;
}

void append_row(ForwardBatch& b, int32_t row, int32_t first_slot, int start, std::span<const int32_t> tokens) {
  std::vector<int32_t> slots(tokens.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = first_slot + start + static_cast<int32_t>(i);
  b.add_sequence(row, start + static_cast<int>(tokens.size()), tokens, slots);
}

std::vector<std::vector<float>> prefill(LlamaModel& model, KvCache& kv,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<int32_t>& first_slot, int budget, int max_rows,
                                        bool want_logits) {
  const size_t n = prompts.size();
  const int64_t vocab = model.config().vocab_size;
  std::vector<std::vector<float>> last(want_logits ? n : 0);
  std::vector<int> done(n, 0);
  size_t next = 0;  // the first prompt not yet complete
  while (next < n) {
    ForwardBatch b;
    std::vector<size_t> finishing;  // row index -> prompt, for rows that end their prompt
    std::vector<int> finishing_row;
    int left = budget;
    for (size_t s = next; s < n && left > 0 && b.num_seqs() < max_rows; ++s) {
      const auto& p = prompts[s];
      const int take = std::min<int>(left, static_cast<int>(p.size()) - done[s]);
      if (take <= 0) continue;
      append_row(b, static_cast<int32_t>(s), first_slot[s], done[s],
                 std::span<const int32_t>(p).subspan(static_cast<size_t>(done[s]), static_cast<size_t>(take)));
      done[s] += take;
      left -= take;
      if (done[s] == static_cast<int>(p.size())) {
        finishing.push_back(s);
        finishing_row.push_back(b.num_seqs() - 1);
      }
    }
    SERVE8_CHECK(b.num_seqs() > 0, "prefill: budget {} admits no tokens", budget);
    Tensor logits = model.forward(b, kv);
    if (want_logits) {
      for (size_t i = 0; i < finishing.size(); ++i) {
        auto& out = last[finishing[i]];
        out.resize(static_cast<size_t>(vocab));
        model.backend().copy_to_host(out.data(), logits.rows(finishing_row[i], 1).data,
                                     static_cast<size_t>(vocab) * sizeof(float));
      }
    }
    while (next < n && done[next] == static_cast<int>(prompts[next].size())) ++next;
  }
  model.backend().synchronize();
  return last;
}

Tensor decode_step(LlamaModel& model, KvCache& kv, ForwardBatch& scratch, const std::vector<int32_t>& tokens,
                   const std::vector<int32_t>& positions, const std::vector<int32_t>& first_slot) {
  scratch.clear();
  for (size_t i = 0; i < tokens.size(); ++i)
    append_row(scratch, static_cast<int32_t>(i), first_slot[i], positions[i], std::span(&tokens[i], 1));
  return model.forward(scratch, kv);
}

}  // namespace serve8
