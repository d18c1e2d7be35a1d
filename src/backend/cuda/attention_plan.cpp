#include "backend/cuda/attention_plan.h"

#include <algorithm>
#include <vector>

namespace serve8 {

int decode_heads_per_block(DType kv_dtype, int num_seqs, int num_kv_heads, int sms) {
  return decode_pairs_heads(kv_dtype) && int64_t{num_seqs} * num_kv_heads >= 2 * int64_t{sms} ? 2 : 1;
}

DecodePlan plan_decode(int num_seqs, const AttentionShape& shape, const AttentionOptions& options) {
  DecodePlan p;
  p.heads_per_block = options.decode_heads > 0 && decode_pairs_heads(shape.kv_dtype)
                          ? options.decode_heads
                          : decode_heads_per_block(shape.kv_dtype, num_seqs, shape.num_kv_heads, shape.sms);
  const int base = num_seqs * p.head_blocks(shape);
  const DecodeSplitRule rule =
      options.decode_min_chunk > 0 ? DecodeSplitRule{options.decode_min_chunk, 1} : decode_split_rule(base, shape.sms);
  p.min_chunk = rule.min_chunk;
  p.min_count = rule.min_count;
  const int resident = shape.blocks_per_sm[p.heads_per_block - 1] * shape.sms;
  p.num_splits = plan_decode_splits(base, resident, kDecodeMaxSplits);
  return p;
}

int max_prefill_work(int max_tokens, int max_seqs, int group) {
  // Each sequence's rows are cut into whole tiles: at most one partial tile per sequence.
  return static_cast<int>((int64_t{max_tokens} * group + kPrefillTileRows - 1) / kPrefillTileRows) + max_seqs;
}

PrefillPlan plan_prefill(std::span<const int32_t> qo_indptr, std::span<const int32_t> kv_indptr, int group,
                         int32_t* work_seq, int32_t* work_row0) {
  struct Item {
    int32_t kv_end, seq, row0;
  };
  std::vector<Item> items;
  PrefillPlan plan;
  const int num_seqs = qo_indptr.empty() ? 0 : static_cast<int>(qo_indptr.size()) - 1;
  for (int b = 0; b < num_seqs; ++b) {
    const int q_len = qo_indptr[static_cast<size_t>(b + 1)] - qo_indptr[static_cast<size_t>(b)];
    const int kv_len = kv_indptr[static_cast<size_t>(b + 1)] - kv_indptr[static_cast<size_t>(b)];
    if (q_len == 1) {
      plan.has_decode = true;
      continue;
    }
    const int rows = q_len * group;
    for (int r0 = 0; r0 < rows; r0 += kPrefillTileRows) {
      const int r_last = std::min(r0 + kPrefillTileRows, rows) - 1;
      items.push_back(Item{kv_len - q_len + r_last / group + 1, b, r0});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.kv_end > b.kv_end; });
  for (size_t i = 0; i < items.size(); ++i) {
    work_seq[i] = items[i].seq;
    work_row0[i] = items[i].row0;
  }
  plan.num_work = static_cast<int>(items.size());
  return plan;
}

}  // namespace serve8
