// Ragged attention batches for the CUDA attention tests: a set of sequences (q_len new tokens over
// kv_len in the cache), their KV slots scattered through a pool, each sequence on a row of the
// request -> slot table (rows in reverse order, so a backend that ignored req_rows would show).
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"

namespace serve8::test {

struct SeqShape {
  int q_len, kv_len;
};

// `fill` writes every KV position of every sequence (one kv_store) and puts each sequence's whole
// slot list into its table row; `step`, the attention batch, uploaded after it on the same rows,
// sends only the new tokens' slots: the rest of kv_indices comes from the table.
struct Scenario {
  ForwardBatch fill, step;
  int64_t num_slots = 0;
  int num_seqs = 0;
  int max_kv_len = 0;

  // A pool and table that fit the scenario exactly: one row per sequence (plus the padding row),
  // rows as long as the longest sequence.
  KvCacheConfig kv_config(int num_kv_heads, int head_dim, DType dtype) const {
    KvCacheConfig c{1, num_kv_heads, head_dim, dtype, num_slots};
    c.max_requests = num_seqs;
    c.max_context_len = max_kv_len;
    return c;
  }
  // reserve_steps for both batches (the fill has the most tokens).
  StepLimits limits(int num_q_heads, int num_kv_heads, int head_dim) const {
    return StepLimits{fill.num_tokens(), num_seqs, num_q_heads, num_kv_heads, head_dim};
  }
};

inline Scenario make_scenario(Rng& rng, const std::vector<SeqShape>& seqs) {
  Scenario s;
  int64_t total = 0;
  for (const SeqShape& q : seqs) {
    total += q.kv_len;
    s.max_kv_len = std::max(s.max_kv_len, q.kv_len);
  }
  s.num_seqs = static_cast<int>(seqs.size());
  s.num_slots = total + 17;  // slot 0 reserved, some never used
  std::vector<int32_t> perm(static_cast<size_t>(s.num_slots - 1));
  std::iota(perm.begin(), perm.end(), 1);
  std::shuffle(perm.begin(), perm.end(), rng.gen());
  size_t next = 0;
  s.fill.clear();
  s.step.clear();
  for (size_t b = 0; b < seqs.size(); ++b) {
    const SeqShape& q = seqs[b];
    const int32_t row = s.num_seqs - 1 - static_cast<int32_t>(b);
    const std::vector<int32_t> slots(perm.begin() + static_cast<std::ptrdiff_t>(next),
                                     perm.begin() + static_cast<std::ptrdiff_t>(next + static_cast<size_t>(q.kv_len)));
    next += static_cast<size_t>(q.kv_len);
    s.fill.add_sequence(row, q.kv_len, std::vector<int32_t>(static_cast<size_t>(q.kv_len), 1), slots);
    s.step.add_sequence(row, q.kv_len, std::vector<int32_t>(static_cast<size_t>(q.q_len), 1),
                        std::vector<int32_t>(slots.end() - q.q_len, slots.end()));
  }
  return s;
}

}  // namespace serve8::test
