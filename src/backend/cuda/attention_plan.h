// The attention unit's host-side plan, as FlashInfer's plan(): from the batch's shape alone (its
// qo/kv indptrs) it decides which kernels run, cuts the prefill work list and picks the decode
// splits. Plain host code, built without CUDA, so CPU tests check it; attention_unit.h runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cuda/decode_splits.h"
#include "core/dtype.h"

namespace serve8 {

constexpr int kDecodeMaxSplits = 128;
// The largest GQA group (query heads per KV head) of the decode and prefill kernels: decode
// blocks keep per-head rows and scratch for this many.
constexpr int kAttentionMaxGroup = 8;
// Rows of (token, group head) pairs one prefill block serves.
constexpr int kPrefillTileRows = 128;

// What the plan needs to know of the model, the pool and the device; fixed at start-up.
struct AttentionShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType kv_dtype = DType::kBF16;
  int sms = 0;
  int blocks_per_sm[2] = {0, 0};  // decode kernel occupancy with 1 and 2 KV heads a block
  int group() const { return num_q_heads / num_kv_heads; }
};

// Overrides of the decode plan, 0 meaning planned: tests reach the split and two-head paths with
// them on short sequences; serving leaves them at 0.
struct AttentionOptions {
  int decode_heads = 0;      // KV heads per decode block (1 or 2; 2 for FP8 pools only: decode_pairs_heads)
  int decode_min_chunk = 0;  // KV tokens per split, with no minimum count of splits
};

struct DecodePlan {
  int heads_per_block = 1;
  int num_splits = 1;  // the grid's x; a sequence uses decode_splits_for(...) of them
  int min_chunk = 1024;
  int min_count = 1;
  // Floats of split partials (o, then lse) the launch writes; 0 when nothing splits.
  size_t partial_floats(int num_seqs, const AttentionShape& s) const {
    return num_splits > 1 ? static_cast<size_t>(num_splits) * static_cast<size_t>(num_seqs) *
                                static_cast<size_t>(s.num_q_heads) * static_cast<size_t>(s.head_dim + 1)
                          : 0;
  }
  int head_blocks(const AttentionShape& s) const { return (s.num_kv_heads + heads_per_block - 1) / heads_per_block; }
};

// KV heads one decode block serves: 2 for FP8 pools when (sequences x KV heads) fill two blocks per
// SM, so that the two halves of a block read two heads' 128-byte rows of the same tokens, adjacent
// in the pool, which the DRAM serves better than lone 128-byte rows; on small grids one head per
// block spreads the warps over twice the SMs. 16-bit rows are 256 bytes already.
// int8 rows are one byte a value too, but two heads a block did not pay for them (H100, B=64 at 4k
// and B=16 at 8k, within 0.9%), so they take one.
int decode_heads_per_block(DType kv_dtype, int num_seqs, int num_kv_heads, int sms);

// Whether a decode block may serve two KV heads of this pool: FP8 rows, whose 8 warps' stages fit
// two blocks an SM.
constexpr bool decode_pairs_heads(DType kv_dtype) { return kv_dtype == DType::kFP8E5M2 || kv_dtype == DType::kFP8E4M3; }

// The decode launch of num_seqs sequences: a function of the launch shape only, so the grid of a
// CUDA-graph bucket stays fixed whatever its sequences' lengths.
DecodePlan plan_decode(int num_seqs, const AttentionShape& shape, const AttentionOptions& options);

// The most prefill work items a step of max_tokens new tokens in max_seqs sequences can give.
int max_prefill_work(int max_tokens, int max_seqs, int group);

// The prefill tiles of a batch (sequences with q_len > 1), kPrefillTileRows rows of (token, group
// head) pairs each, heaviest KV range first so the long tiles start early. Writes work_seq and
// work_row0 (room for max_prefill_work(...) items each).
struct PrefillPlan {
  int num_work = 0;
  bool has_decode = false;  // some sequence has q_len == 1
};
PrefillPlan plan_prefill(std::span<const int32_t> qo_indptr, std::span<const int32_t> kv_indptr, int group,
                         int32_t* work_seq, int32_t* work_row0);

}  // namespace serve8
