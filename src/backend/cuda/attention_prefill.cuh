// Prefill/extend attention on tensor cores (the generic kernel for small head dims is in
// attention_generic.cuh).
//
// Prefill: a block of 8 warps owns 128 rows of one KV head, a row being one (new token, group
// head) pair, so a K/V tile in shared memory serves every query head of the group. Per 64-token
// KV tile: gather K and V rows by slot, dequantize once into padded shared memory (bf16 for a bf16
// pool; fp16 for fp16 and FP8 pools, which hold only fp16 values, so nothing is rounded), S = Q·K^T with mma.sync
// m16n8k16, online softmax in the accumulator registers (FA2 layout: a thread owns rows gid and gid + 8 of its warp's
// 16), then O += P·V with P reused from registers and V fragments from ldmatrix.trans. Rows of the pad (16 bytes per
// row) keep ldmatrix conflict-free.
#pragma once

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"

namespace serve8 {

constexpr int kPrefillKvTile = 64;

// Eight stored elements as eight MMA operands (16 bytes).
template <DType kKv>
__device__ __forceinline__ uint4 to_operand8(const typename KvTraits<kKv>::Raw8& r) {
  if constexpr (kKv == DType::kBF16 || kKv == DType::kF16) {
    return r;  // already the operand type
  } else {
    return KvTraits<kKv>::to_half8(r);  // FP8 to fp16 operands, exact; int8/int4 rounded once
  }
}

// Two consecutive bf16 query elements as one operand register.
template <bool kF16>
__device__ __forceinline__ uint32_t q_operand(const uint16_t* ptr) {
  const uint32_t bits = *reinterpret_cast<const uint32_t*>(ptr);
  if constexpr (kF16) {
    return pack_half2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
  } else {
    return bits;
  }
}

// 128 rows share each K/V tile; tile i + 1 is loaded into registers while the tensor cores work
// on tile i.
constexpr int kPrefillWarps = kPrefillTileRows / 16;

template <DType kKv, int kD>
__global__ void __launch_bounds__(kPrefillWarps * 32) attention_prefill_kernel(const AttentionParams p) {
  constexpr int kWarps = kPrefillWarps;
  using Raw8 = typename KvTraits<kKv>::Raw8;
  constexpr bool kF16 = KvTraits<kKv>::kMmaF16;
  constexpr int kThreads = kWarps * 32;
  constexpr int kTileRows = kWarps * 16;
  constexpr int kBc = kPrefillKvTile;
  constexpr int kStride = kD + 8;                   // elements per shared row, 16 bytes of pad
  constexpr int kChunks = kBc * kD / 8 / kThreads;  // 8-element chunks per thread per tile
  __shared__ __align__(16) uint16_t s_k[kBc * kStride];
  __shared__ __align__(16) uint16_t s_v[kBc * kStride];

  const int b = p.work_seq[blockIdx.x];
  const int r0 = p.work_row0[blockIdx.x];
  const int h = blockIdx.y;
  const int q_begin = p.qo_indptr[b];
  const int q_len = p.qo_indptr[b + 1] - q_begin;
  const int kv_begin = p.kv_indptr[b];
  const int kv_len = p.kv_indptr[b + 1] - kv_begin;
  const int prefix = kv_len - q_len;
  const int g = p.num_q_heads / p.num_kv_heads;
  const int rows = q_len * g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, t4 = lane % 4;

  // This thread's two rows (gid and gid + 8 of the warp's 16).
  int lim[2];  // last KV position the row attends to; -1 for rows past the end
  int64_t qo_off[2];
  bool rvalid[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int r = r0 + warp * 16 + gid + 8 * k;
    rvalid[k] = r < rows;
    const int i = rvalid[k] ? r / g : 0;
    const int j = rvalid[k] ? r - i * g : 0;
    lim[k] = rvalid[k] ? prefix + i : -1;
    qo_off[k] = (int64_t{q_begin + i} * p.num_q_heads + h * g + j) * kD;
  }
  const auto* q = static_cast<const uint16_t*>(p.q);  // bf16 (fp32 q runs the generic kernel)
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int kc = 0; kc < kD / 16; ++kc) {
    const int c = kc * 16 + 2 * t4;
    qf[kc][0] = rvalid[0] ? q_operand<kF16>(q + qo_off[0] + c) : 0u;
    qf[kc][1] = rvalid[1] ? q_operand<kF16>(q + qo_off[1] + c) : 0u;
    qf[kc][2] = rvalid[0] ? q_operand<kF16>(q + qo_off[0] + c + 8) : 0u;
    qf[kc][3] = rvalid[1] ? q_operand<kF16>(q + qo_off[1] + c + 8) : 0u;
  }

  const int r_last = min(r0 + kTileRows, rows) - 1;
  const int kv_end = prefix + r_last / g + 1;
  const float sc = p.softmax_scale * p.k_scale[h] * kLog2e;
  const int32_t* indices = p.kv_indices + kv_begin;

  // Thread-owned chunks of a K/V tile: chunk i is token (tid + i * kThreads) / (D / 8), columns
  // 8 * ((tid + i * kThreads) % (D / 8)). Tokens past kv_end load as zero, so that P (zero there)
  // times V stays finite.
  Raw8 rk[kChunks], rv[kChunks];
  const auto load_tile = [&](int c0) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int c = c0 + idx / (kD / 8);
      rk[i] = Raw8{};
      rv[i] = Raw8{};
      if (c < kv_end) {
        const int64_t row = kv_row(indices[c], h, p.num_kv_heads);
        const int col = (idx % (kD / 8)) * 8;
        rk[i] = load_kv8<kKv>(p.k_pool, p.row_params, false, row, kD, col);
        rv[i] = load_kv8<kKv>(p.v_pool, p.row_params, true, row, kD, col);
      }
    }
  };
  const auto store_tile = [&]() {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int at = (idx / (kD / 8)) * kStride + (idx % (kD / 8)) * 8;
      *reinterpret_cast<uint4*>(&s_k[at]) = to_operand8<kKv>(rk[i]);
      *reinterpret_cast<uint4*>(&s_v[at]) = to_operand8<kKv>(rv[i]);
    }
  };

  float o[kD / 8][4];
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  load_tile(0);
  store_tile();
  for (int c0 = 0; c0 < kv_end; c0 += kBc) {
    __syncthreads();                             // tile c0 is in shared memory
    if (c0 + kBc < kv_end) load_tile(c0 + kBc);  // in flight during the MMAs below

    // S = Q · K^T for this warp's 16 rows and the tile's 64 tokens.
    float s[kBc / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < kD / 16; kc += 2) {
        uint32_t kb[4];
        ldmatrix_x4(kb, &s_k[(nt * 8 + lane % 8) * kStride + kc * 16 + (lane / 8) * 8]);
        mma_16816<kF16>(s[nt], qf[kc], kb[0], kb[1]);
        mma_16816<kF16>(s[nt], qf[kc + 1], kb[2], kb[3]);
      }
    }
    // Online softmax; the four lanes of a quad share a row.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float mx = m[k];
#pragma unroll
      for (int nt = 0; nt < kBc / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = c0 + nt * 8 + 2 * t4 + e;
          const float v = c > lim[k] ? -INFINITY : s[nt][2 * k + e] * sc;
          s[nt][2 * k + e] = v;
          mx = fmaxf(mx, v);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float corr = safe_exp2(m[k], mx);
      m[k] = mx;
      l[k] *= corr;
#pragma unroll
      for (int dn = 0; dn < kD / 8; ++dn) {
        o[dn][2 * k] *= corr;
        o[dn][2 * k + 1] *= corr;
      }
#pragma unroll
      for (int nt = 0; nt < kBc / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = safe_exp2(s[nt][2 * k + e], mx);
          s[nt][2 * k + e] = pr;
          l[k] += pr;
        }
      }
    }
    // O += P · V.
#pragma unroll
    for (int kc = 0; kc < kBc / 16; ++kc) {
      const uint32_t a[4] = {pack_operand<kF16>(s[2 * kc][0], s[2 * kc][1]),
                             pack_operand<kF16>(s[2 * kc][2], s[2 * kc][3]),
                             pack_operand<kF16>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                             pack_operand<kF16>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int dn = 0; dn < kD / 8; dn += 2) {
        uint32_t vb[4];
        const int mi = lane / 8;
        ldmatrix_x4_trans(vb, &s_v[(kc * 16 + (mi & 1) * 8 + lane % 8) * kStride + dn * 8 + (mi >> 1) * 8]);
        mma_16816<kF16>(o[dn], a, vb[0], vb[1]);
        mma_16816<kF16>(o[dn + 1], a, vb[2], vb[3]);
      }
    }
    if (c0 + kBc < kv_end) {
      __syncthreads();  // every warp is done with tile c0
      store_tile();
    }
  }

  const float v_scale = p.v_scale[h];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    l[k] += __shfl_xor_sync(0xffffffffu, l[k], 1);
    l[k] += __shfl_xor_sync(0xffffffffu, l[k], 2);
    if (!rvalid[k]) continue;
    const float inv = l[k] > 0.0f ? v_scale / l[k] : 0.0f;
    uint16_t* dst = static_cast<uint16_t*>(p.out) + qo_off[k];
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dst + dn * 8 + 2 * t4) = pack_bf16x2(o[dn][2 * k] * inv, o[dn][2 * k + 1] * inv);
    }
  }
}

// p.num_work tiles of kPrefillTileRows rows each (the plan cuts them).
template <DType kKv>
void launch_prefill_typed(const AttentionParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_work, p.num_kv_heads);
  if (p.head_dim == 128) {
    attention_prefill_kernel<kKv, 128><<<grid, kPrefillWarps * 32, 0, stream>>>(p);
  } else {
    attention_prefill_kernel<kKv, 64><<<grid, kPrefillWarps * 32, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("attention_prefill_kernel");
}

}  // namespace serve8
