// Decode attention (q_len == 1) on tensor cores, with split-KV.
//
// A block of 4 warps serves one (split, sequence, KV head). The group's query heads (at most 8)
// are the rows of one 16-row MMA tile, so each K/V row loaded serves the whole group and the
// per-element work (dot products, P·V) runs on tensor cores instead of CUDA-core FMAs and
// shuffles. Per 64-token tile the block gathers K and V by slot and dequantizes them once into
// shared memory (as the prefill kernel does); warp w then takes tokens [16w, 16w + 16) of the
// tile with its own online-softmax state, and the four states merge in shared memory at the end.
// Splits merge in attention_merge_kernel by log-sum-exp, as for the CUDA-core decode kernel.
#pragma once

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_prefill.cuh"

namespace serve8 {

template <DType kKv, int kD>
__global__ void __launch_bounds__(128, 3) attention_decode_mma_kernel(const AttentionParams p) {
  constexpr bool kF16 = KvTraits<kKv>::kMmaF16;
  constexpr int kBc = kPrefillKvTile;  // 64 tokens, 16 per warp
  constexpr int kStride = kD + 8;
  constexpr int kChunks = kBc * kD / 8 / 128;
  constexpr int kMaxGroup = kAttentionMaxGroup;
  __shared__ __align__(16) uint16_t s_k[kBc * kStride];
  __shared__ __align__(16) uint16_t s_v[kBc * kStride];
  __shared__ int s_slot[kBc];
  __shared__ float s_m[4][kMaxGroup], s_l[4][kMaxGroup];
  static_assert(4 * kMaxGroup * kD * sizeof(float) <= sizeof(s_k), "merge scratch reuses s_k");

  DecodeBlock w;
  if (!decode_block(p, w)) return;
  const int h = w.h, q_begin = w.q_begin, kv_begin = w.kv_begin, start = w.start, end = w.end;

  const int g = p.num_q_heads / p.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, t4 = lane % 4;
  const bool row_valid = gid < g;  // row gid is query head h * g + gid; rows 8..15 stay empty

  uint32_t qf[kD / 16][4];
  {
    const uint16_t* qp = static_cast<const uint16_t*>(p.q) + (int64_t{q_begin} * p.num_q_heads + h * g + gid) * kD;
#pragma unroll
    for (int kc = 0; kc < kD / 16; ++kc) {
      qf[kc][0] = row_valid ? q_operand<kF16>(qp + kc * 16 + 2 * t4) : 0u;
      qf[kc][1] = 0u;
      qf[kc][2] = row_valid ? q_operand<kF16>(qp + kc * 16 + 8 + 2 * t4) : 0u;
      qf[kc][3] = 0u;
    }
  }
  const float sc = p.softmax_scale * p.k_scale[h] * kLog2e;
  const int64_t slot_stride = int64_t{p.num_kv_heads} * kD;
  float o[kD / 8][4];
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // of row gid

  for (int c0 = start; c0 < end; c0 += kBc) {
    __syncthreads();  // the previous tile is consumed
    if (threadIdx.x < kBc) {
      const int c = c0 + threadIdx.x;
      s_slot[threadIdx.x] = c < end ? p.kv_indices[kv_begin + c] : -1;
    }
    __syncthreads();
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const void* pool = which == 0 ? p.k_pool : p.v_pool;
      uint16_t* dst = which == 0 ? s_k : s_v;
      typename KvTraits<kKv>::Raw8 raw[kChunks];
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int idx = threadIdx.x + i * 128;
        const int slot = s_slot[idx / (kD / 8)];
        raw[i] = typename KvTraits<kKv>::Raw8{};
        if (slot >= 0) raw[i] = load_raw8<kKv>(pool, slot * slot_stride + h * kD + (idx % (kD / 8)) * 8);
      }
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int idx = threadIdx.x + i * 128;
        *reinterpret_cast<uint4*>(&dst[(idx / (kD / 8)) * kStride + (idx % (kD / 8)) * 8]) = to_operand8<kKv>(raw[i]);
      }
    }
    __syncthreads();

    // S = Q · K^T over this warp's 16 tokens (two n-tiles of 8).
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < kD / 16; kc += 2) {
        uint32_t kb[4];
        ldmatrix_x4(kb, &s_k[(warp * 16 + nt * 8 + lane % 8) * kStride + kc * 16 + (lane / 8) * 8]);
        mma_16816<kF16>(s[nt], qf[kc], kb[0], kb[1]);
        mma_16816<kF16>(s[nt], qf[kc + 1], kb[2], kb[3]);
      }
    }
    // Online softmax of row gid over the warp's tokens; the quad's four lanes share the row.
    float mx = m;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = c0 + warp * 16 + nt * 8 + 2 * t4 + e;
        const float v = c < end ? s[nt][e] * sc : -INFINITY;
        s[nt][e] = v;
        mx = fmaxf(mx, v);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float corr = safe_exp2(m, mx);
    m = mx;
    l *= corr;
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      o[dn][0] *= corr;
      o[dn][1] *= corr;
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = safe_exp2(s[nt][e], mx);
        l += s[nt][e];
      }
    }
    // O += P · V; rows 8..15 of P are zero.
    const uint32_t a[4] = {pack_operand<kF16>(s[0][0], s[0][1]), 0u, pack_operand<kF16>(s[1][0], s[1][1]), 0u};
#pragma unroll
    for (int dn = 0; dn < kD / 8; dn += 2) {
      uint32_t vb[4];
      const int mi = lane / 8;
      ldmatrix_x4_trans(vb, &s_v[(warp * 16 + (mi & 1) * 8 + lane % 8) * kStride + dn * 8 + (mi >> 1) * 8]);
      mma_16816<kF16>(o[dn], a, vb[0], vb[1]);
      mma_16816<kF16>(o[dn + 1], a, vb[2], vb[3]);
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // Merge the four warps' states (row gid of each) through shared memory.
  __syncthreads();
  float* s_o = reinterpret_cast<float*>(s_k);  // [4][kMaxGroup][kD]
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) {
    float* dst = &s_o[(warp * kMaxGroup + gid) * kD + dn * 8 + 2 * t4];
    dst[0] = o[dn][0];
    dst[1] = o[dn][1];
  }
  if (t4 == 0) {
    s_m[warp][gid] = m;
    s_l[warp][gid] = l;
  }
  __syncthreads();
  decode_merge_warps<kD, kMaxGroup>(p, w, g, s_o, s_m, s_l, threadIdx.x, blockDim.x);
}

template <DType kKv>
void launch_decode_mma_typed(const AttentionParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_splits, p.num_seqs, p.num_kv_heads);
  if (p.head_dim == 128) {
    attention_decode_mma_kernel<kKv, 128><<<grid, 128, 0, stream>>>(p);
  } else {
    attention_decode_mma_kernel<kKv, 64><<<grid, 128, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("attention_decode_mma_kernel");
}

}  // namespace serve8
