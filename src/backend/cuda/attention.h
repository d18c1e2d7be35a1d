// Paged attention on the GPU: the kernels' parameters and launchers.
//
// The batch is ragged: sequence b has q_len new tokens over kv_len cached ones (ForwardBatch).
// Two kernels serve head_dim 64/128 in bf16 compute, and a generic one the rest:
//  - decode (q_len == 1): one block per (split, sequence, KV head or two) holding the group's
//    query heads as the rows of an MMA tile, so each K/V load serves the whole group
//    (attention_decode_stream.cuh). Long contexts split over num_splits blocks, merged by
//    log-sum-exp in the last block to finish; the grid depends on the batch size and head count
//    only, so a CUDA graph captured at a bucketed batch size replays it.
//  - prefill/extend (q_len > 1): tensor cores, one block per 128 rows of (token, group head) pairs
//    of one KV head; K/V tiles are dequantized once into shared memory (attention_prefill.cuh).
//  - generic (head dims 8, 16, 32; and fp32 compute, the reference path): one warp per (token,
//    query head), CUDA cores, any rows.
// All read the pool in its storage dtype and dequantize in registers; k_scale folds into the
// softmax scale and v_scale into the output; fp32 accumulation. int8/int4 pools (decode and
// prefill only) carry each row's scale (and minimum) in row_params: decode folds K's into the
// scores and V's into P; their q arrives rotated and their output leaves rotated, except in a
// decode-only launch, whose kernel rotates both itself (rotate_norm). The host side (which kernels,
// how many splits, the prefill work list) is attention_plan.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_plan.h"
#include "core/dtype.h"

namespace serve8 {

struct AttentionParams {
  DType dtype = DType::kBF16;    // of q and out: bf16, or fp32 (generic kernel only)
  const void* q = nullptr;       // [T, Hq, D]
  void* out = nullptr;           // [T, Hq, D]
  const void* k_pool = nullptr;  // [pages, Hkv, page, D] storage dtype (kv_layout.h)
  const void* v_pool = nullptr;
  const float* k_scale = nullptr;  // [Hkv]
  const float* v_scale = nullptr;
  // int8/int4 pools: each row's parameters, 4 bytes of K's then 4 of V's per row pair
  // (KvLayer::row_params); q comes rotated and out is left rotated (the backend applies the
  // Walsh-Hadamard transforms) unless rotate_norm is set.
  const void* row_params = nullptr;
  // Decode-only launches on int8/int4 pools: q arrives as it is and out leaves unrotated, v_mean
  // ([Hkv, D], or null) added back; the decode kernel applies the transforms (norm 1 / sqrt(D)).
  float rotate_norm = 0.0f;
  const float* v_mean = nullptr;
  const int32_t* qo_indptr = nullptr;   // [B + 1]
  const int32_t* kv_indptr = nullptr;   // [B + 1]
  const int32_t* kv_indices = nullptr;  // pool slots
  const int32_t* token_seq = nullptr;   // [T] sequence of each token (generic kernel)
  int num_seqs = 0;
  int num_tokens = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float softmax_scale = 1.0f;
  // Decode split-KV: up to num_splits blocks per (sequence, KV head); partials of sequence b,
  // split s, query head h at partial_o[((s * B + b) * Hq + h) * D], lse (log2 units) likewise.
  int num_splits = 1;
  int split_min_chunk = 1024;  // a split per this many KV tokens, at least split_min_count
  int split_min_count = 1;     // (decode_split_rule, decode_splits_for)
  int decode_heads = 1;        // KV heads per decode block (AttentionPlan)
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  // One counter per (sequence, block of KV heads), zero between launches: the last split block
  // to finish merges the splits.
  int* split_counters = nullptr;
  // Prefill work list: item i is the tile starting at row work_row0[i] of sequence
  // work_seq[i], rows being (token, group head) pairs, token-major.
  const int32_t* work_seq = nullptr;
  const int32_t* work_row0 = nullptr;
  int num_work = 0;
};

// The head_dim/group combinations each kernel supports; anything else is refused by name before
// launching.
bool attention_fast_path(int head_dim, int group);     // decode + prefill kernels
bool attention_generic_path(int head_dim, int group);  // the generic kernel (also fp32 q/out, fp32 KV)
// fp32 q/out (--dtype float32) runs the generic kernel for head dims 8 to 128: at 64 and 128 its
// per-lane registers spill, so it is a reference path (HF fp32 checks), not a fast one.
bool attention_fp32_path(int head_dim, int group);

// The decode kernel, launched as a programmatic dependent of the kernel before it (it waits with
// griddepcontrol.wait before its first global read), as FlashInfer's decode does on sm_90.
void launch_attention_decode(const AttentionParams& p, DType kv_dtype, cudaStream_t stream);
// Blocks of the decode kernel one SM holds at once (occupancy) with `heads_per_block` KV heads a
// block, for planning splits. Sets the kernel's attributes on first use: call it before capturing.
int decode_blocks_per_sm(DType kv_dtype, int head_dim, int heads_per_block);
void launch_attention_prefill(const AttentionParams& p, DType kv_dtype, cudaStream_t stream);
void launch_attention_generic(const AttentionParams& p, DType kv_dtype, cudaStream_t stream);

}  // namespace serve8
