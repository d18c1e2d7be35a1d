// The decode kernel's block geometry and its split partials: which tokens a block of a decode
// launch covers, how it writes its result, the log-sum-exp weights that merge the splits, and the
// merge itself in the last split block to finish.
#pragma once

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_splits.h"

namespace serve8 {

// What block (split, sequence, KV head) of a decode launch covers: tokens [start, end) of the
// sequence's KV. decode_block is false for blocks with nothing to do (the sequence is a prefill
// row, for the prefill kernel, or too short to use this split).
struct DecodeBlock {
  int split, b, h, q_begin, kv_begin, n_split, start, end;
};

__device__ __forceinline__ bool decode_block(const AttentionParams& p, DecodeBlock& w) {
  // Heads vary fastest: the blocks of one (split, sequence) run together and share the sequence's
  // slot list in L2.
  w.split = blockIdx.z;
  w.b = blockIdx.y;
  w.h = blockIdx.x;
  w.q_begin = p.qo_indptr[w.b];
  if (p.qo_indptr[w.b + 1] - w.q_begin != 1) return false;
  w.kv_begin = p.kv_indptr[w.b];
  const int kv_len = p.kv_indptr[w.b + 1] - w.kv_begin;
  w.n_split = decode_splits_for(kv_len, p.num_splits, p.split_min_chunk, p.split_min_count);
  if (w.split >= w.n_split) return false;
  const int chunk = ceil_div(kv_len, w.n_split);
  w.start = w.split * chunk;
  w.end = min(kv_len, w.start + chunk);
  return true;
}

// One whole warp (lane 0-31): the log-sum-exp weights of the n split partials of row (sequence,
// query head) into w[0, n), and w[kDecodeMaxSplits] = v_scale / their sum (0 when every split was
// empty), the scale of the weighted sum of the partial outputs.
__device__ __forceinline__ void split_weights(const AttentionParams& p, int64_t row, int n, int lane, float* w) {
  const int64_t split_stride = int64_t{p.num_seqs} * p.num_q_heads;
  float mx = -INFINITY;
  for (int s = lane; s < n; s += 32) mx = fmaxf(mx, __ldcg(&p.partial_lse[s * split_stride + row]));
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int s = lane; s < n; s += 32) {
    const float ws = safe_exp2(__ldcg(&p.partial_lse[s * split_stride + row]), mx);
    w[s] = ws;
    sum += ws;
  }
  sum = warp_sum(sum);
  if (lane == 0) {
    const int hq = static_cast<int>(row % p.num_q_heads), g = p.num_q_heads / p.num_kv_heads;
    w[kDecodeMaxSplits] = sum > 0.0f ? p.v_scale[hq / g] / sum : 0.0f;
  }
}

// Element d of query head j (of the block's group of g) from its normalized output o and
// log-sum-exp (log2 units): the final bf16 output (v_scale applied) when the sequence did not
// split, else the split's partial for the merge in the last block. With `rotated` (int8/int4
// under rotate_norm) the final output, rounded to bf16 alike, goes to rotated[j * kD + d] instead,
// to leave the rotation there.
template <int kD>
__device__ __forceinline__ void decode_write(const AttentionParams& p, const DecodeBlock& w, int g, int j, int d,
                                             float o, float lse, float v_scale, float* rotated) {
  const int hq = w.h * g + j;
  if (w.n_split == 1) {
    const uint16_t bits = float_to_bf16_bits(o * v_scale);
    if (rotated) {
      rotated[j * kD + d] = bf16_bits_to_float(bits);
    } else {
      static_cast<uint16_t*>(p.out)[(int64_t{w.q_begin} * p.num_q_heads + hq) * kD + d] = bits;
    }
  } else {
    const int64_t row = (int64_t{w.split} * p.num_seqs + w.b) * p.num_q_heads + hq;
    p.partial_o[row * kD + d] = o;
    if (d == 0) p.partial_lse[row] = lse;
  }
}

// The decode kernel's last step: 4 warps each hold an online-softmax state per head
// (max s_m, sum s_l, unnormalized output s_o[warp][head][d]); merge them and write the result,
// with `threads` threads numbered from `tid` (the block's, or the half serving w.h). s_mn, when
// given ([4][kMaxGroup]), adds to every d of a warp's head (int4: the V minimums' share); rotated
// as decode_write's.
template <int kD, int kMaxGroup>
__device__ __forceinline__ void decode_merge_warps(const AttentionParams& p, const DecodeBlock& w, int g,
                                                   const float* s_o, const float (*s_m)[kMaxGroup],
                                                   const float (*s_l)[kMaxGroup], const float* s_mn, int tid,
                                                   int threads, float* rotated) {
  const float v_scale = p.v_scale[w.h];
  for (int idx = tid; idx < g * kD; idx += threads) {
    const int j = idx / kD;
    const int d = idx - j * kD;
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < 4; ++r) mx = fmaxf(mx, s_m[r][j]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float wt = safe_exp2(s_m[r][j], mx);
      sum += s_l[r][j] * wt;
      acc += (s_o[(r * kMaxGroup + j) * kD + d] + (s_mn ? s_mn[r * kMaxGroup + j] : 0.0f)) * wt;
    }
    decode_write<kD>(p, w, g, j, d, sum > 0.0f ? acc / sum : 0.0f, sum > 0.0f ? mx + log2f(sum) : -INFINITY, v_scale,
                     rotated);
  }
}

// sum_s w[s] * first[s * stride] over n splits, kInFlight loads issued before the first use: the
// partials sit in L2, and a merge that waits on one load at a time pays n L2 round trips.
__device__ __forceinline__ float4 weighted_split_sum(const float4* first, int64_t stride, const float* w, int n) {
  constexpr int kInFlight = 8;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = 0; s0 < n; s0 += kInFlight) {
    float4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      v[u] = s0 + u < n ? __ldcg(first + (s0 + u) * stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const float wt = s0 + u < n ? w[s0 + u] : 0.0f;
      o.x = fmaf(wt, v[u].x, o.x);
      o.y = fmaf(wt, v[u].y, o.y);
      o.z = fmaf(wt, v[u].z, o.z);
      o.w = fmaf(wt, v[u].w, o.w);
    }
  }
  return o;
}

// Where merge_splits_in_last_block's rotated rows start in the stage memory (floats, 16-byte
// aligned): after the split weights and the last-block flag.
constexpr int merge_rotated_offset(int heads) {
  return (heads * kAttentionMaxGroup * (kDecodeMaxSplits + 1) + 1 + 3) / 4 * 4;
}

// The fused merge: after its partials, each split block counts itself in; the last of a
// (sequence, block of KV heads) to arrive merges all the splits (the classic threadfence
// reduction), so no second kernel is launched. smem is the block's stage memory, free by now.
// Every warp works on the merge: first a warp per query head finds the split weights, then each
// thread owns 4 consecutive d of one query head and sums the splits' float4 partials
// (weighted_split_sum), so a GQA group's heads merge side by side instead of one after another.
// kRotate (int8/int4 under rotate_norm): the merged rows leave the rotation a warp per head.
template <int kD, int kHeads, bool kRotate>
__device__ __forceinline__ void merge_splits_in_last_block(const AttentionParams& p, int b, int n_split, int g,
                                                           unsigned char* smem) {
  constexpr int kW = kDecodeMaxSplits + 1;  // weights of a query head, then its output scale
  constexpr int kMaxGroup = kAttentionMaxGroup;
  float* s_w = reinterpret_cast<float*>(smem);
  int* s_last = reinterpret_cast<int*>(smem) + kHeads * kMaxGroup * kW;
  float* s_rot = s_w + merge_rotated_offset(kHeads);  // [kHeads * kMaxGroup][kD] with kRotate
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = p.split_counters + blockIdx.y * gridDim.x + blockIdx.x;
    const bool last = atomicAdd(counter, 1) == n_split - 1;
    if (last) *counter = 0;  // every split has arrived: ready for the next launch
    *s_last = last;
  }
  __syncthreads();
  if (!*s_last) return;
  __threadfence();
  const int kvh0 = blockIdx.x * kHeads;
  const int n_heads = min(kHeads, p.num_kv_heads - kvh0) * g;  // query heads of the block
  const int hq0 = kvh0 * g;
  const int64_t split_stride = int64_t{p.num_seqs} * p.num_q_heads;
  const int64_t row0 = int64_t{b} * p.num_q_heads + hq0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = warp; j < n_heads; j += blockDim.x / 32) split_weights(p, row0 + j, n_split, lane, s_w + j * kW);
  __syncthreads();
  const int q_begin = p.qo_indptr[b];
  for (int e = threadIdx.x; e < n_heads * (kD / 4); e += blockDim.x) {
    const int j = e / (kD / 4), d = (e % (kD / 4)) * 4;
    const float* wts = s_w + j * kW;
    const float4 o = weighted_split_sum(reinterpret_cast<const float4*>(p.partial_o + (row0 + j) * kD + d),
                                        split_stride * kD / 4, wts, n_split);
    const float scale = wts[kDecodeMaxSplits];
    uint2 packed;
    packed.x = pack_bf16x2(o.x * scale, o.y * scale);
    packed.y = pack_bf16x2(o.z * scale, o.w * scale);
    uint16_t* out = static_cast<uint16_t*>(p.out) + (int64_t{q_begin} * p.num_q_heads + hq0 + j) * kD;
    if constexpr (kRotate) {
      if (p.rotate_norm != 0.0f) {
        float* r = s_rot + j * kD + d;
        r[0] = bf16_bits_to_float(static_cast<uint16_t>(packed.x));
        r[1] = bf16_bits_to_float(static_cast<uint16_t>(packed.x >> 16));
        r[2] = bf16_bits_to_float(static_cast<uint16_t>(packed.y));
        r[3] = bf16_bits_to_float(static_cast<uint16_t>(packed.y >> 16));
        continue;
      }
    }
    *reinterpret_cast<uint2*>(out + d) = packed;
  }
  if constexpr (kRotate) {
    if (p.rotate_norm == 0.0f) return;
    __syncthreads();
    for (int j = warp; j < n_heads; j += blockDim.x / 32) {
      const int hq = hq0 + j;
      hadamard_row<kD / 32>(s_rot + j * kD, p.v_mean ? p.v_mean + (hq / g) * kD : nullptr, p.rotate_norm,
                            static_cast<uint16_t*>(p.out) + (int64_t{q_begin} * p.num_q_heads + hq) * kD);
    }
  }
}

}  // namespace serve8
