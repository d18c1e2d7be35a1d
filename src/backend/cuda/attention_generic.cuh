// The generic attention kernel: CUDA cores, head dims 8, 16 and 32 (stories260K's 8), any GQA
// group, prefill and decode rows alike. It is also the only kernel that takes fp32 q/out (fp32
// compute, --dtype float32) and an fp32 pool, so that models can be checked on the GPU against
// fp32 references; for that it also runs head dims 64 and 128 (slowly: the head lives in each
// lane's registers). The tensor-core kernels stay bf16.
#pragma once

#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"

namespace serve8 {

// An fp32 pool, read one element at a time (the generic kernel's only access).
template <>
struct KvTraits<DType::kF32> {
  __device__ static float load1(const void* base, int64_t i) { return static_cast<const float*>(base)[i]; }
};

// One warp per (token, query head), each lane a strided subset of the KV positions with the whole
// head in registers, merged by shuffles. TQ is the type of q and out: uint16_t (bf16 bits) or float.
template <DType kKv, int kD, typename TQ>
__global__ void __launch_bounds__(128) attention_generic_kernel(const AttentionParams p) {
  using Tr = KvTraits<kKv>;
  using A = Act<TQ>;
  const int64_t warp_id = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t t = warp_id / p.num_q_heads;
  if (t >= p.num_tokens) return;  // whole warps leave together
  const int hq = static_cast<int>(warp_id - t * p.num_q_heads);
  const int b = p.token_seq[t];
  const int q_begin = p.qo_indptr[b];
  const int q_len = p.qo_indptr[b + 1] - q_begin;
  const int kv_begin = p.kv_indptr[b];
  const int kv_len = p.kv_indptr[b + 1] - kv_begin;
  const int lim = kv_len - q_len + static_cast<int>(t - q_begin);
  const int g = p.num_q_heads / p.num_kv_heads;
  const int h = hq / g;
  const float sc = p.softmax_scale * p.k_scale[h] * kLog2e;
  float q[kD], acc[kD];
  const TQ* qp = static_cast<const TQ*>(p.q) + (t * p.num_q_heads + hq) * kD;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    q[d] = A::load(qp + d) * sc;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int c = lane; c <= lim; c += 32) {
    const int64_t off = kv_row(p.kv_indices[kv_begin + c], h, p.num_kv_heads) * kD;
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < kD; ++d) s = fmaf(q[d], Tr::load1(p.k_pool, off + d), s);
    const float mx = fmaxf(m, s);
    const float corr = safe_exp2(m, mx);
    const float pr = exp2f(s - mx);
    l = l * corr + pr;
#pragma unroll
    for (int d = 0; d < kD; ++d) acc[d] = fmaf(pr, Tr::load1(p.v_pool, off + d), acc[d] * corr);
    m = mx;
  }
  const float mx = warp_max(m);
  const float w = safe_exp2(m, mx);
  const float sum = warp_sum(l * w);
  const float inv = sum > 0.0f ? p.v_scale[h] / sum : 0.0f;
  TQ* op = static_cast<TQ*>(p.out) + (t * p.num_q_heads + hq) * kD;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    const float v = warp_sum(acc[d] * w);
    if (lane == d % 32) A::store(op + d, v * inv);
  }
}

template <DType kKv, typename TQ>
void launch_generic_kernel(const AttentionParams& p, cudaStream_t stream) {
  const int64_t warps = int64_t{p.num_tokens} * p.num_q_heads;
  const int blocks = static_cast<int>((warps + 3) / 4);
  switch (p.head_dim) {
    case 8:
      attention_generic_kernel<kKv, 8, TQ><<<blocks, 128, 0, stream>>>(p);
      break;
    case 16:
      attention_generic_kernel<kKv, 16, TQ><<<blocks, 128, 0, stream>>>(p);
      break;
    case 32:
      attention_generic_kernel<kKv, 32, TQ><<<blocks, 128, 0, stream>>>(p);
      break;
    default:
      // 64 and 128 for fp32 q/out only (attention_fp32_path): the reference path of --dtype float32.
      if constexpr (std::is_same_v<TQ, float>) {
        if (p.head_dim == 64) {
          attention_generic_kernel<kKv, 64, TQ><<<blocks, 128, 0, stream>>>(p);
        } else {
          attention_generic_kernel<kKv, 128, TQ><<<blocks, 128, 0, stream>>>(p);
        }
      }
      break;
  }
  SERVE8_CUDA_CHECK_LAUNCH("attention_generic_kernel");
}

// bf16 or fp32 q/out (p.dtype); an fp32 pool only with fp32 q/out (the backend rejects the rest).
template <DType kKv>
void launch_generic_typed(const AttentionParams& p, cudaStream_t stream) {
  if (p.dtype == DType::kF32) {
    launch_generic_kernel<kKv, float>(p, stream);
  } else if constexpr (kKv != DType::kF32) {
    launch_generic_kernel<kKv, uint16_t>(p, stream);
  }
}

}  // namespace serve8
