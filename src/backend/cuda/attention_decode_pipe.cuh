// Decode attention on tensor cores with the K/V loads pipelined (SERVE8_CUDA_DECODE=pipelined).
// EXPERIMENTAL: written to lift the tensor-core decode kernel (attention_decode_mma.cuh) off
// ~40-60% of the copy bandwidth (PERF.md: it loads a tile, waits, then computes); not the default
// until measured on the GPU against it.
//
// Same work split as that kernel: a block of 4 warps per (split, sequence, KV head), the group's
// query heads as the rows of one MMA tile, 64-token tiles of which each warp takes 16. What
// changes is how a tile arrives: every thread issues cp.async 16-byte copies of the raw K/V rows
// of tile i + kStages - 1 (page offsets from kv_indices, once per row and tile) while the block
// computes tile i, so loads stay in flight across the compute. bf16/fp16 rows land directly in the
// padded operand layout that ldmatrix reads; FP8 rows land raw (half the bytes per copy) and are
// converted once per tile into fp16 operand buffers (E5M2 by byte placement, E4M3 by
// cvt.rn.f16x2.e4m3x2), as the prefill kernel does.
#pragma once

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_prefill.cuh"

namespace serve8 {

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

template <DType kKv, int kD>
struct DecodePipeLayout {
  static constexpr int kBc = kPrefillKvTile;  // 64 tokens
  static constexpr int kStride = kD + 8;      // fp16/bf16 operand rows, padded against bank conflicts
  static constexpr int kStages = 2;
  static constexpr bool kRawIsOperand = kKv == DType::kBF16 || kKv == DType::kF16;
  static constexpr int kElemBytes = kRawIsOperand ? 2 : 1;
  static constexpr int kRowChunks = kD * kElemBytes / 16;                // 16-byte copies per K (or V) row
  static constexpr int kLoads = kBc * kRowChunks / 128;                  // per thread, per tile, for K (and V)
  static constexpr int kRawRowBytes = kRawIsOperand ? kStride * 2 : kD;  // a row in a stage
  static constexpr int kStageBytes = 2 * kBc * kRawRowBytes;             // K then V
  static constexpr int kOperandBytes = kRawIsOperand ? 0 : 2 * kBc * kStride * 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + kOperandBytes;
};

template <DType kKv, int kD>
__global__ void __launch_bounds__(128, 3) attention_decode_pipe_kernel(const AttentionParams p) {
  using L = DecodePipeLayout<kKv, kD>;
  constexpr bool kF16 = KvTraits<kKv>::kMmaF16;
  constexpr int kBc = L::kBc, kStride = L::kStride, kStages = L::kStages;
  constexpr int kMaxGroup = 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_m[4][kMaxGroup], s_l[4][kMaxGroup];
  static_assert(4 * kMaxGroup * kD * sizeof(float) <= L::kSmemBytes, "merge scratch reuses the stages");

  const int split = blockIdx.x, b = blockIdx.y, h = blockIdx.z;
  const int q_begin = p.qo_indptr[b];
  if (p.qo_indptr[b + 1] - q_begin != 1) return;  // prefill rows: the other kernel
  const int kv_begin = p.kv_indptr[b];
  const int kv_len = p.kv_indptr[b + 1] - kv_begin;
  const int n_split = decode_splits_for(kv_len, p.num_splits);
  if (split >= n_split) return;
  const int chunk = ceil_div(kv_len, n_split);
  const int start = split * chunk;
  const int end = min(kv_len, start + chunk);
  const int num_tiles = ceil_div(max(end - start, 0), kBc);

  const int g = p.num_q_heads / p.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, t4 = lane % 4;
  const bool row_valid = gid < g;  // row gid is query head h * g + gid; rows 8..15 stay empty
  const int64_t slot_stride = int64_t{p.num_kv_heads} * kD;

  auto stage_k = [&](int st) { return smem + st * L::kStageBytes; };
  auto stage_v = [&](int st) { return smem + st * L::kStageBytes + kBc * L::kRawRowBytes; };
  // Issues tile `it`'s copies into stage `st` (none past the last tile), then commits a group, so
  // that every thread has committed the same number of groups at every point.
  auto issue = [&](int it, int st) {
    if (it < num_tiles) {
      const int c0 = start + it * kBc;
#pragma unroll
      for (int i = 0; i < L::kLoads; ++i) {
        const int idx = threadIdx.x + i * 128;
        const int tok = idx / L::kRowChunks, col = idx % L::kRowChunks;
        const int c = c0 + tok;
        const bool valid = c < end;
        const int64_t slot = valid ? p.kv_indices[kv_begin + c] : 0;
        const int64_t off = ((slot * slot_stride + h * kD) * L::kElemBytes) + col * 16;
        const int at = tok * L::kRawRowBytes + col * 16;
        cp_async_16(stage_k(st) + at, static_cast<const unsigned char*>(p.k_pool) + off, valid);
        cp_async_16(stage_v(st) + at, static_cast<const unsigned char*>(p.v_pool) + off, valid);
      }
    }
    cp_async_commit();
  };

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
  float o[kD / 8][4];
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // of row gid

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s, s);
  for (int it = 0; it < num_tiles; ++it) {
    const int st = it % kStages;
    cp_async_wait<kStages - 2>();  // tile it has landed (this thread's copies)
    __syncthreads();               // ... and everyone's; the previous tile is consumed
    const uint16_t* s_k;
    const uint16_t* s_v;
    if constexpr (L::kRawIsOperand) {
      s_k = reinterpret_cast<const uint16_t*>(stage_k(st));
      s_v = reinterpret_cast<const uint16_t*>(stage_v(st));
    } else {
      // FP8: convert the raw tile once into the fp16 operand buffers, then refill its stage.
      uint16_t* op_k = reinterpret_cast<uint16_t*>(smem + kStages * L::kStageBytes);
      uint16_t* op_v = op_k + kBc * kStride;
      for (int idx = threadIdx.x; idx < kBc * kD / 8; idx += 128) {
        const int tok = idx / (kD / 8), col8 = idx % (kD / 8);
        const auto rk = *reinterpret_cast<const typename KvTraits<kKv>::Raw8*>(stage_k(st) + tok * kD + col8 * 8);
        const auto rv = *reinterpret_cast<const typename KvTraits<kKv>::Raw8*>(stage_v(st) + tok * kD + col8 * 8);
        *reinterpret_cast<uint4*>(&op_k[tok * kStride + col8 * 8]) = to_operand8<kKv>(rk);
        *reinterpret_cast<uint4*>(&op_v[tok * kStride + col8 * 8]) = to_operand8<kKv>(rv);
      }
      __syncthreads();
      issue(it + kStages - 1, (it + kStages - 1) % kStages);
      s_k = op_k;
      s_v = op_v;
    }
    const int c0 = start + it * kBc;

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
    if constexpr (L::kRawIsOperand) {
      __syncthreads();  // the stage is read: refill it
      issue(it + kStages, st);
    }
  }
  cp_async_wait<0>();
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // Merge the four warps' states (row gid of each) through shared memory.
  __syncthreads();
  float* s_o = reinterpret_cast<float*>(smem);  // [4][kMaxGroup][kD]
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
  const float v_scale = p.v_scale[h];
  for (int idx = threadIdx.x; idx < g * kD; idx += blockDim.x) {
    const int j = idx / kD;
    const int d = idx - j * kD;
    float mx2 = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) mx2 = fmaxf(mx2, s_m[w][j]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float wt = safe_exp2(s_m[w][j], mx2);
      sum += s_l[w][j] * wt;
      acc += s_o[(w * kMaxGroup + j) * kD + d] * wt;
    }
    const float o_final = sum > 0.0f ? acc / sum : 0.0f;
    const int hq = h * g + j;
    if (n_split == 1) {
      static_cast<uint16_t*>(p.out)[(int64_t{q_begin} * p.num_q_heads + hq) * kD + d] =
          float_to_bf16_bits(o_final * v_scale);
    } else {
      const int64_t row = (int64_t{split} * p.num_seqs + b) * p.num_q_heads + hq;
      p.partial_o[row * kD + d] = o_final;
      if (d == 0) p.partial_lse[row] = sum > 0.0f ? mx2 + log2f(sum) : -INFINITY;
    }
  }
}

template <DType kKv, int kD>
void launch_decode_pipe_kernel(const AttentionParams& p, cudaStream_t stream) {
  constexpr int smem = DecodePipeLayout<kKv, kD>::kSmemBytes;
  static bool configured = false;  // once per instantiation, before any graph capture (warm-up)
  if (!configured) {
    SERVE8_CUDA_CHECK(
        cudaFuncSetAttribute(attention_decode_pipe_kernel<kKv, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    configured = true;
  }
  const dim3 grid(p.num_splits, p.num_seqs, p.num_kv_heads);
  attention_decode_pipe_kernel<kKv, kD><<<grid, 128, smem, stream>>>(p);
}

template <DType kKv>
void launch_decode_pipe_typed(const AttentionParams& p, cudaStream_t stream) {
  if (p.head_dim == 128) {
    launch_decode_pipe_kernel<kKv, 128>(p, stream);
  } else {
    launch_decode_pipe_kernel<kKv, 64>(p, stream);
  }
  SERVE8_CUDA_CHECK_LAUNCH("attention_decode_pipe_kernel");
}

}  // namespace serve8
