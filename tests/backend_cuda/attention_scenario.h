// Ragged attention batches for the CUDA attention tests: a set of sequences (q_len new tokens over
// kv_len in the cache), their KV slots scattered through a pool.
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

// `fill` writes every KV position of every sequence (one kv_store); `step` is the attention batch.
struct Scenario {
  ForwardBatch fill, step;
  int64_t num_slots = 0;
};

inline Scenario make_scenario(Rng& rng, const std::vector<SeqShape>& seqs) {
  Scenario s;
  int64_t total = 0;
  for (const SeqShape& q : seqs) total += q.kv_len;
  s.num_slots = total + 17;  // slot 0 reserved, some never used
  std::vector<int32_t> perm(static_cast<size_t>(s.num_slots - 1));
  std::iota(perm.begin(), perm.end(), 1);
  std::shuffle(perm.begin(), perm.end(), rng.gen());
  size_t next = 0;
  s.fill.qo_indptr = s.fill.kv_indptr = s.step.qo_indptr = s.step.kv_indptr = {0};
  for (const SeqShape& q : seqs) {
    const std::vector<int32_t> slots(perm.begin() + static_cast<std::ptrdiff_t>(next),
                                     perm.begin() + static_cast<std::ptrdiff_t>(next + static_cast<size_t>(q.kv_len)));
    next += static_cast<size_t>(q.kv_len);
    for (int i = 0; i < q.kv_len; ++i) {
      s.fill.tokens.push_back(1);
      s.fill.positions.push_back(i);
      s.fill.out_slots.push_back(slots[static_cast<size_t>(i)]);
    }
    s.fill.kv_indices.insert(s.fill.kv_indices.end(), slots.begin(), slots.end());
    s.fill.qo_indptr.push_back(s.fill.qo_indptr.back() + q.kv_len);
    s.fill.kv_indptr.push_back(s.fill.kv_indptr.back() + q.kv_len);
    for (int i = q.kv_len - q.q_len; i < q.kv_len; ++i) {
      s.step.tokens.push_back(1);
      s.step.positions.push_back(i);
      s.step.out_slots.push_back(slots[static_cast<size_t>(i)]);
    }
    s.step.kv_indices.insert(s.step.kv_indices.end(), slots.begin(), slots.end());
    s.step.qo_indptr.push_back(s.step.qo_indptr.back() + q.q_len);
    s.step.kv_indptr.push_back(s.step.kv_indptr.back() + q.kv_len);
  }
  return s;
}

}  // namespace serve8::test
