// Decode attention (q_len == 1) on CUDA cores with split-KV; see attention.h for the plan.
//
// A block of 128 threads serves one (split, sequence, KV head). Threads form groups of D/8 lanes;
// a group holds one K/V row at a time (8 elements a lane: one 16-byte load for 16-bit formats,
// 8 bytes for FP8) and kUnroll rows are loaded before the first use, so several gathers are in
// flight. Every lane keeps the group's G query heads (q, running max, sum and output slice), so
// one K/V load serves the whole GQA group. Groups merge in shared memory at the end; splits merge
// in attention_merge_kernel by log-sum-exp.
#pragma once

#include "backend/cuda/attention_common.cuh"
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
  w.split = blockIdx.x;
  w.b = blockIdx.y;
  w.h = blockIdx.z;
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

// The log-sum-exp merge of sequence b's n split partials for query head hq, written as the final
// bf16 output (v_scale applied), for attention_merge_kernel (the stream kernel merges its own:
// merge_splits_in_last_block). Every thread of the block calls it (it synchronizes); s_w holds
// kDecodeMaxSplits + 1 floats of shared memory.
__device__ __forceinline__ void merge_decode_splits(const AttentionParams& p, int b, int hq, int n, float* s_w) {
  const int64_t split_stride = int64_t{p.num_seqs} * p.num_q_heads;
  const int64_t row = int64_t{b} * p.num_q_heads + hq;
  if (threadIdx.x < 32) split_weights(p, row, n, threadIdx.x, s_w);
  __syncthreads();
  const float scale = s_w[kDecodeMaxSplits];
  const int q_begin = p.qo_indptr[b];
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < n; ++s) o = fmaf(s_w[s], __ldcg(&p.partial_o[(s * split_stride + row) * p.head_dim + d]), o);
    static_cast<uint16_t*>(p.out)[(int64_t{q_begin} * p.num_q_heads + hq) * p.head_dim + d] =
        float_to_bf16_bits(o * scale);
  }
  __syncthreads();  // s_w is the next call's
}

// Element d of query head j (of the block's group of g) from its normalized output o and
// log-sum-exp (log2 units): the final bf16 output (v_scale applied) when the sequence did not
// split, else the split's partial for attention_merge_kernel.
template <int kD>
__device__ __forceinline__ void decode_write(const AttentionParams& p, const DecodeBlock& w, int g, int j, int d,
                                             float o, float lse, float v_scale) {
  const int hq = w.h * g + j;
  if (w.n_split == 1) {
    static_cast<uint16_t*>(p.out)[(int64_t{w.q_begin} * p.num_q_heads + hq) * kD + d] = float_to_bf16_bits(o * v_scale);
  } else {
    const int64_t row = (int64_t{w.split} * p.num_seqs + w.b) * p.num_q_heads + hq;
    p.partial_o[row * kD + d] = o;
    if (d == 0) p.partial_lse[row] = lse;
  }
}

// The tensor-core decode kernels' last step: 4 warps each hold an online-softmax state per head
// (max s_m, sum s_l, unnormalized output s_o[warp][head][d]); merge them and write the result,
// with `threads` threads numbered from `tid` (the block's, or the half serving w.h).
template <int kD, int kMaxGroup>
__device__ __forceinline__ void decode_merge_warps(const AttentionParams& p, const DecodeBlock& w, int g,
                                                   const float* s_o, const float (*s_m)[kMaxGroup],
                                                   const float (*s_l)[kMaxGroup], int tid, int threads) {
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
      acc += s_o[(r * kMaxGroup + j) * kD + d] * wt;
    }
    decode_write<kD>(p, w, g, j, d, sum > 0.0f ? acc / sum : 0.0f, sum > 0.0f ? mx + log2f(sum) : -INFINITY, v_scale);
  }
}

template <int kD, int kG>
struct DecodeConfig {
  static constexpr int kThreads = 128;
  static constexpr int kTpr = kD / 8;  // lanes per K/V row
  static constexpr int kGroups = kThreads / kTpr;
  static constexpr int kUnroll = kG >= 8 ? 2 : 4;  // rows in flight per group (registers allow)
  static constexpr int kStep = kGroups * kUnroll;
};

template <DType kKv, int kD, int kG>
__global__ void __launch_bounds__(128) attention_decode_kernel(const AttentionParams p) {
  using Cfg = DecodeConfig<kD, kG>;
  using Tr = KvTraits<kKv>;
  using Raw8 = typename Tr::Raw8;
  constexpr int kTpr = Cfg::kTpr, kGroups = Cfg::kGroups, kUnroll = Cfg::kUnroll;
  __shared__ __align__(16) float s_o[kGroups][kG][kD];
  __shared__ float s_m[kGroups][kG];
  __shared__ float s_l[kGroups][kG];
  __shared__ float s_lse[kG];

  DecodeBlock w;
  if (!decode_block(p, w)) return;
  const int h = w.h, q_begin = w.q_begin, kv_begin = w.kv_begin, start = w.start, end = w.end;

  const int g = p.num_q_heads / p.num_kv_heads;
  const int grp = threadIdx.x / kTpr;
  const int lane = threadIdx.x % kTpr;
  const int d0 = lane * 8;
  const float scale = p.softmax_scale * p.k_scale[h] * kLog2e;

  float q[kG][8];
  float acc[kG][8];
  float m[kG], l[kG];
#pragma unroll
  for (int j = 0; j < kG; ++j) {
    if (j < g) {
      const uint16_t* qp = static_cast<const uint16_t*>(p.q) + (int64_t{q_begin} * p.num_q_heads + h * g + j) * kD + d0;
      unpack_bf16x8(*reinterpret_cast<const uint4*>(qp), q[j]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[j][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      q[j][e] *= scale;
      acc[j][e] = 0.0f;
    }
    m[j] = -INFINITY;
    l[j] = 0.0f;
  }

  const int64_t slot_stride = int64_t{p.num_kv_heads} * kD;
  const int32_t* indices = p.kv_indices + kv_begin;
  // The loop bound is uniform over the block, so every lane reaches the shuffles; rows past
  // `end` are masked instead.
  for (int base = start; base < end; base += Cfg::kStep) {
    Raw8 kr[kUnroll], vr[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kGroups + grp;
      valid[u] = t < end;
      kr[u] = Raw8{};
      vr[u] = Raw8{};
      if (valid[u]) {
        const int64_t off = indices[t] * slot_stride + h * kD + d0;
        kr[u] = load_raw8<kKv>(p.k_pool, off);
        vr[u] = load_raw8<kKv>(p.v_pool, off);
      }
    }
    float s[kG][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      Tr::to_float8(kr[u], kf);
#pragma unroll
      for (int j = 0; j < kG; ++j) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(q[j][e], kf[e], dot);
        s[j][u] = dot;
      }
    }
#pragma unroll
    for (int j = 0; j < kG; ++j) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int o = kTpr / 2; o > 0; o >>= 1) s[j][u] += __shfl_xor_sync(0xffffffffu, s[j][u], o);
        if (!valid[u]) s[j][u] = -INFINITY;
      }
      float mx = m[j];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[j][u]);
      const float corr = safe_exp2(m[j], mx);
      m[j] = mx;
      l[j] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[j][e] *= corr;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[8];
      Tr::to_float8(vr[u], vf);
#pragma unroll
      for (int j = 0; j < kG; ++j) {
        const float pr = safe_exp2(s[j][u], m[j]);
        l[j] += pr;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j][e] = fmaf(pr, vf[e], acc[j][e]);
      }
    }
  }

  // Merge the groups: every lane of a group holds the same m and l.
#pragma unroll
  for (int j = 0; j < kG; ++j) {
    float4* dst = reinterpret_cast<float4*>(&s_o[grp][j][d0]);
    dst[0] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    dst[1] = make_float4(acc[j][4], acc[j][5], acc[j][6], acc[j][7]);
    if (lane == 0) {
      s_m[grp][j] = m[j];
      s_l[grp][j] = l[j];
    }
  }
  __syncthreads();
  if (threadIdx.x < kG) {
    const int j = threadIdx.x;
    float mx = -INFINITY;
    for (int r = 0; r < kGroups; ++r) mx = fmaxf(mx, s_m[r][j]);
    float sum = 0.0f;
    for (int r = 0; r < kGroups; ++r) {
      const float w = safe_exp2(s_m[r][j], mx);
      s_m[r][j] = w;  // becomes the group's weight
      sum += s_l[r][j] * w;
    }
    for (int r = 0; r < kGroups; ++r) s_m[r][j] = sum > 0.0f ? s_m[r][j] / sum : 0.0f;
    s_lse[j] = sum > 0.0f ? mx + log2f(sum) : -INFINITY;
  }
  __syncthreads();
  const float v_scale = p.v_scale[h];
  for (int idx = threadIdx.x; idx < g * kD; idx += blockDim.x) {
    const int j = idx / kD;
    const int d = idx - j * kD;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kGroups; ++r) o = fmaf(s_o[r][j][d], s_m[r][j], o);
    decode_write<kD>(p, w, g, j, d, o, s_lse[j], v_scale);
  }
}

template <DType kKv, int kD, int kG>
void launch_decode_shape(const AttentionParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_splits, p.num_seqs, p.num_kv_heads);
  attention_decode_kernel<kKv, kD, kG><<<grid, DecodeConfig<kD, kG>::kThreads, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("attention_decode_kernel");
}

// Turns the runtime head_dim and group into template constants; groups round up to 1, 2, 4, 8
// (lanes of heads past the real group compute on zeros and are never written).
template <DType kKv>
void launch_decode_typed(const AttentionParams& p, cudaStream_t stream) {
  const int g = p.num_q_heads / p.num_kv_heads;
  const int gb = g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8;
  if (p.head_dim == 128) {
    switch (gb) {
      case 1:
        return launch_decode_shape<kKv, 128, 1>(p, stream);
      case 2:
        return launch_decode_shape<kKv, 128, 2>(p, stream);
      case 4:
        return launch_decode_shape<kKv, 128, 4>(p, stream);
      default:
        return launch_decode_shape<kKv, 128, 8>(p, stream);
    }
  }
  switch (gb) {
    case 1:
      return launch_decode_shape<kKv, 64, 1>(p, stream);
    case 2:
      return launch_decode_shape<kKv, 64, 2>(p, stream);
    case 4:
      return launch_decode_shape<kKv, 64, 4>(p, stream);
    default:
      return launch_decode_shape<kKv, 64, 8>(p, stream);
  }
}

}  // namespace serve8
