// Paged attention on the GPU: launchers and the parameters they share.
//
// The batch is ragged: sequence b has q_len new tokens over kv_len cached ones (ForwardBatch).
// Three kernels cover it:
//  - decode (q_len == 1, head_dim 64/128): one block per (split, sequence, KV head) holding the
//    group's query heads, so each K/V load serves the whole group; on tensor cores (the heads are
//    the rows of an MMA tile), or on CUDA cores with SERVE8_CUDA_DECODE=cuda-cores. Long contexts are split over
//    num_splits blocks and merged by log-sum-exp; the grid is a function of the batch size and head count only, so a
//    CUDA graph captured at a bucketed batch size replays it.
//  - prefill/extend (q_len > 1, head_dim 64/128): tensor cores (mma.sync m16n8k16), one block per
//    64 rows of (token, group head) pairs of one KV head; K/V tiles are dequantized once into
//    shared memory (bf16 for a bf16 pool, fp16 for fp16 and FP8 pools: every FP8 value is an fp16
//    value and the conversion is a byte placement or one cvt per two) and the block walks the
//    causal range.
//  - generic (small head dims such as 8): one warp per (token, query head), CUDA cores, any rows.
//    The only kernel for fp32 compute (fp32 q/out, --dtype float32) and for an fp32 pool.
// All read the pool in its storage dtype (a template parameter) and dequantize on the fly;
// k_scale folds into the softmax scale and v_scale into the output; fp32 accumulation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace serve8 {

struct AttentionParams {
  DType dtype = DType::kBF16;    // of q and out: bf16, or fp32 (generic kernel only)
  const void* q = nullptr;       // [T, Hq, D]
  void* out = nullptr;           // [T, Hq, D]
  const void* k_pool = nullptr;  // [slots, Hkv, D] storage dtype
  const void* v_pool = nullptr;
  const float* k_scale = nullptr;  // [Hkv]
  const float* v_scale = nullptr;
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
  int decode_heads = 1;        // KV heads per decode block (decode_heads_per_block)
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  // The fused merge (the stream kernel's default; SERVE8_CUDA_DECODE_MERGE=kernel turns it off): one
  // counter per (sequence, block of KV heads), zero between launches; the last split block to
  // finish merges. Null: the separate merge kernel.
  int* split_counters = nullptr;
  // Launch the stream decode kernel with programmatic dependent launch: it may start while the
  // kernel before it drains, and waits (griddepcontrol.wait) before its first global read.
  bool dependent_launch = false;
  // Prefill work list: item i is the tile starting at row work_row0[i] of sequence
  // work_seq[i], rows being (token, group head) pairs, token-major.
  const int32_t* work_seq = nullptr;
  const int32_t* work_row0 = nullptr;
  int num_work = 0;
};

constexpr int kDecodeMaxSplits = 128;
// The largest GQA group (query heads per KV head) of the fast decode and prefill kernels: decode
// blocks keep per-head rows and scratch for this many.
constexpr int kAttentionMaxGroup = 8;
// Split-KV: the stream kernel gets the fewest splits that keep its resident blocks busy
// (decode_splits.h); a sequence uses as many of them as decode_split_rule and its length give.
// The comparison kernels launch kDecodeBlocksPerSm blocks per SM. SERVE8_CUDA_DECODE_BLOCKS_PER_SM
// (a fixed target for every kernel) and SERVE8_CUDA_DECODE_MIN_CHUNK override them for experiments.
constexpr int kDecodeBlocksPerSm = 16;

// The KV dtype and head_dim/group combinations each launcher supports; anything else is rejected
// by the backend before launching.
bool attention_fast_path(int head_dim, int group);     // decode + prefill kernels
bool attention_generic_path(int head_dim, int group);  // the generic kernel (also fp32 q/out, fp32 KV)
// fp32 q/out (--dtype float32) runs the generic kernel for head dims 8 to 128: at 64 and 128 its
// per-lane registers spill, so it is a reference path (HF fp32 checks), not a fast one.
bool attention_fp32_path(int head_dim, int group);

// kStream (default; attention_decode_stream.cuh): tensor cores fed by a cp.async pipeline per warp.
// kTensorCores (SERVE8_CUDA_DECODE=tensor-cores): one 64-token tile per block at a time, converted
// into shared memory. kCudaCores (cuda-cores): FMAs and shuffles. The last two stay for comparison.
enum class DecodeKernel { kStream, kTensorCores, kCudaCores };
void launch_attention_decode(const AttentionParams& p, DType kv_dtype, DecodeKernel kernel, cudaStream_t stream);
// Blocks of the decode kernel one SM holds at once (occupancy), for planning splits
// (decode_splits.h); 0 for the comparison kernels, which keep a fixed blocks-per-SM target.
int decode_blocks_per_sm(DType kv_dtype, int head_dim, DecodeKernel kernel, int heads_per_block);
// KV heads one block of the decode kernel serves (AttentionParams::decode_heads; the grid's z is
// ceil(Hkv / this)). 2 for FP8 pools when (sequences x KV heads) fill two blocks per SM: the two
// halves of such a block read two heads' 128-byte rows of the same tokens, adjacent in the pool
// ([slot, Hkv, D]), at about the same time, which the DRAM serves better than lone 128-byte rows
// (H200, Llama-3 heads, B=64, ctx 4096, shuffled slots: 92-93% of the copy bandwidth against
// 90.5-91%). On small grids one head per block spreads the same warps over twice the SMs: at
// B=1 two heads per block took 1.25-1.5x as long. 16-bit rows are 256 bytes already. forced (1 or 2,
// SERVE8_CUDA_DECODE_HEADS; 0: choose) overrides the choice where two heads exist.
int decode_heads_per_block(DType kv_dtype, DecodeKernel kernel, int num_seqs, int num_kv_heads, int sms, int forced);
// The default prefill kernel (8 warps, 128-row tiles, next K/V tile prefetched into registers)
// or the simple one (4 warps, 64-row tiles; SERVE8_CUDA_PREFILL=simple). The plan's work list
// must be cut in prefill_tile_rows(kernel) rows.
enum class PrefillKernel { kPipelined, kSimple };
constexpr int prefill_tile_rows(PrefillKernel k) { return k == PrefillKernel::kPipelined ? 128 : 64; }
void launch_attention_prefill(const AttentionParams& p, DType kv_dtype, PrefillKernel kernel, cudaStream_t stream);
void launch_attention_generic(const AttentionParams& p, DType kv_dtype, cudaStream_t stream);

}  // namespace serve8
