// Decode attention (q_len == 1) on tensor cores, streaming K/V through a cp.async pipeline per warp.
//
// Decode is a gather of K/V rows at memory speed; everything else must hide under it. 4 warps of a
// block serve one (split, sequence, KV head) (an FP8 block on a large grid has 8 warps for two KV
// heads: kHeads), and each warp works alone through its own steps of 16 tokens (int4: 32, two
// 16-token tiles; steps w, w + 4, ... of the split) with kStages steps in flight: it issues the
// 16-byte cp.async copies of step i + kStages - 1 (the raw stored bytes: FP8 moves half the bytes
// of bf16) before computing step i, and synchronizes only within itself. Page offsets are read
// once per step, one lane per row, and shuffled to the lanes that copy the row.
//
// A tile's 16 tokens are the rows of an MMA tile (m16n8k16) and the group's query heads its 8
// columns, so one K/V row serves the whole GQA group: S^T = K Q^T takes the K rows as the A operand
// (one MMA per 16 d, no zero rows), and O^T = V^T P^T (d as MMA rows, heads as columns) takes P^T,
// which movmatrix transposes out of S^T's accumulators. Operands are built in registers straight
// from the staged bytes: FP8 by cvt.rn.f16x2.e4m3x2 (E4M3) or byte placement (E5M2), both exact
// in fp16; bf16/fp16 by ldmatrix. For one-byte values that needs no converted copy in shared memory
// because the head dimension is permuted: a dot product does not care in which order d is summed,
// so each thread reads whole 16-byte chunks of its two K rows and the query is loaded in the same
// order; for O^T each thread owns a contiguous run of d for every token it multiplies (a byte pair
// from two tokens makes one operand register), and d is un-permuted at the end.
// Chunks are XOR-swizzled per row so that these reads are free of bank conflicts (head dim 128;
// FP8 at head dim 64 keeps a two-way conflict on V).
//
// k_scale folds into the softmax scale and v_scale into the output; fp32 accumulation. Splits
// merge by log-sum-exp in the last split block to finish (merge_splits_in_last_block).
//
// int8 and int4 pools stage each row pair's fp16 parameters behind the tiles; codes become fp16
// operands exactly (an int8 code's stored byte under fp16's exponent, less the bias; int4's nibbles
// keep theirs, 1024, which the scores and O^T take out per head), K's scale multiplies the scores
// (int4: plus its minimum times the sum of q), V's scale multiplies P, and int4's V minimum adds
// p * minimum to a per-head sum merged like l.
#pragma once

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_decode_stream_layout.cuh"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/attention_prefill.cuh"

namespace serve8 {

template <DType kKv, int kD, int kHeadsPerBlock>
__global__ void __launch_bounds__(DecodeStream<kKv, kD, kHeadsPerBlock>::kThreads,
                                  DecodeStream<kKv, kD, kHeadsPerBlock>::kMinBlocks)
    attention_decode_stream_kernel(const AttentionParams p) {
  using L = DecodeStream<kKv, kD, kHeadsPerBlock>;
  using Kv = KvTraits<kKv>;  // FP8 operands: Kv::half2_bits
  constexpr int kHeads = L::kHeads;
  constexpr bool kF16 = KvTraits<kKv>::kMmaF16;
  constexpr int kStages = L::kStages, kStep = L::kStep, kSub = L::kSub, kMaxGroup = kAttentionMaxGroup;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float s_m[kHeads][4][kMaxGroup], s_l[kHeads][4][kMaxGroup];
  __shared__ float s_mn[kHeads][4][L::kI4 ? kMaxGroup : 1];  // int4: sum of p * V's row minimum
  static_assert(kHeads * 4 * kMaxGroup * kD * sizeof(float) <= L::kSmemBytes, "the merge reuses the stages");
  static_assert((kHeads * kMaxGroup * (kDecodeMaxSplits + 1) + 1) * sizeof(float) <= L::kSmemBytes,
                "the split merge reuses the stages");
  // int8/int4 under rotate_norm: q's rotated rows, and the outputs before their rotation back
  // (behind the merge's rows in the stages; these pools have one KV head a block).
  __shared__ __align__(16) uint16_t s_q[L::kRowParams ? kMaxGroup * kD : 1];
  static_assert(!L::kRowParams || (kHeads == 1 && 5 * kMaxGroup * kD * sizeof(float) <= L::kSmemBytes &&
                                   (merge_rotated_offset(kHeads) + kMaxGroup * kD) * sizeof(float) <= L::kSmemBytes),
                "int8/int4 rotate their outputs in the stages");

  // Under a programmatic dependent launch the kernel before this one may still be running (or its
  // writes not yet visible): nothing global is read before this wait (a no-op otherwise).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // The o_proj GEMM after it (the skinny kernel at up to 16 rows) may start streaming its weights
  // once every block of this grid is running: they read DRAM while decode waits on latency.
  allow_dependent_launch();
  DecodeBlock w;
  if (!decode_block(p, w)) return;
  const int half = threadIdx.x / 128;  // the block's head this warp serves
  // A half past the last KV head (odd Hkv) redoes the last head and writes nothing.
  const bool head_ok = w.h * kHeads + half < p.num_kv_heads;
  w.h = min(w.h * kHeads + half, p.num_kv_heads - 1);
  const int h = w.h, q_begin = w.q_begin, kv_begin = w.kv_begin, start = w.start, end = w.end;

  const int g = p.num_q_heads / p.num_kv_heads;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int gid = lane / 4, t4 = lane % 4;
  const int n_steps = ceil_div(max(end - start, 0), kStep);
  const int my_steps = n_steps > warp ? (n_steps - warp + 3) / 4 : 0;

  const unsigned char* k_pool = static_cast<const unsigned char*>(p.k_pool);
  const unsigned char* v_pool = static_cast<const unsigned char*>(p.v_pool);
  const auto* row_params = static_cast<const unsigned char*>(p.row_params);
  const int32_t* indices = p.kv_indices + kv_begin;
  const uint32_t warp_smem = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + (threadIdx.x / 32) * L::kWarpBytes;
  const unsigned char* warp_ptr = smem + (threadIdx.x / 32) * L::kWarpBytes;

  // The pool slot of row `lane` of this warp's step `it` (lanes 0..15; -1 past the end).
  auto load_slot = [&](int it) {
    const int t = start + (warp + 4 * it) * kStep + lane;
    return it < my_steps && lane < kStep && t < end ? indices[t] : -1;
  };
  // Copies this warp's step `it` into its stage, then commits a group (an empty one past the
  // last step, so that every lane always has committed the same number of groups).
  auto issue = [&](int it, int my_slot) {
    if (it < my_steps) {
      const uint32_t stage = warp_smem + (it % kStages) * L::kStageBytes;
      // The pool row of this lane's slot (pool rows fit int32: checked where the pool is made).
      const int my_row = my_slot < 0 ? -1 : static_cast<int>(kv_row(my_slot, h, p.num_kv_heads));
      if constexpr (L::kRowParams) {
        // Lane r < 16 copies row r's K and V parameters (one record) behind the two tiles.
        if (lane < kStep) {
          constexpr int kBytes = L::kParamPairBytes;
          const int64_t at = (my_row < 0 ? 0 : my_row) * int64_t{kBytes};
          cp_async_small_zfill<kBytes>(stage + 2 * L::kTileBytes + lane * kBytes, row_params + at, my_row >= 0);
        }
      }
      const int c = lane % L::kChunks;
#pragma unroll
      for (int pass = 0; pass < L::kPasses; ++pass) {
        const int r = lane / L::kChunks + pass * L::kRowsPerPass;
        const int row = __shfl_sync(0xffffffffu, my_row, r);
        const int64_t off = (row < 0 ? 0 : row) * int64_t{L::kRowBytes} + c * 16;
        const uint32_t at = r * L::kRowBytes + L::swizzle(r, c) * 16;
        cp_async_16_zfill(stage + at, k_pool + off, row >= 0);
        cp_async_16_zfill(stage + L::kTileBytes + at, v_pool + off, row >= 0);
      }
    }
    cp_async_commit();
  };

  // The first steps' copies go out before anything else, so that q's load overlaps them. Page
  // offsets are read a step early from then on: their latency hides under a step.
  int slots[kStages];
#pragma unroll
  for (int s = 0; s < kStages; ++s) slots[s] = load_slot(s);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s, slots[s]);
  int next_slot = slots[kStages - 1];

  // Q^T (the B operand, head gid as column gid) in the d order of the K reads; heads past g are zero.
  uint32_t qf[kD / 16][2];
  // int4: the sum of a head's q values, which each row's minimum multiplies, and the sum of its q
  // operands, which K's bias of 1024 adds to every score (heads 2 t4, 2 t4 + 1).
  float qsum[2] = {0.0f, 0.0f}, qsum_gid = 0.0f, kbias[2] = {0.0f, 0.0f}, kbias_gid = 0.0f;
  {
    const uint16_t* q_rows = static_cast<const uint16_t*>(p.q) + (int64_t{q_begin} * p.num_q_heads + h * g) * kD;
    if constexpr (L::kRowParams) {
      // q . k = (H q) . (H k): the warps rotate the group's rows (bf16, as hadamard_rows) while
      // the first steps' copies are in flight. rotate_norm is the same for the whole block.
      if (p.rotate_norm != 0.0f) {
        for (int j = warp; j < g; j += 4) hadamard_row<kD / 32>(q_rows + j * kD, nullptr, p.rotate_norm, s_q + j * kD);
        __syncthreads();
        q_rows = s_q;
      }
    }
    const uint16_t* qp = q_rows + gid * kD;
#pragma unroll
    for (int kc = 0; kc < kD / 16; ++kc) {
      if constexpr (L::kI4) {
        // MMA kc takes nibbles n0, n0 + 4 (b0) and n0 + 1, n0 + 5 (b1) of word kc / 2 of
        // the thread's K words (read below), biased: K's low nibbles are 1024 + code and its high
        // ones 1024 + 16 code, so b1 (which the high ones multiply) holds q / 16, exactly.
        const int d = t4 * (kD / 4) + (kc / 2) * 8 + 2 * (kc % 2);
        const auto q2 = [&](int a, int b) { return pack_half2(bf16_bits_to_float(qp[a]), bf16_bits_to_float(qp[b])); };
        qf[kc][0] = gid < g ? q2(d, d + 4) : 0u;
        qf[kc][1] = gid < g ? q2(d + 1, d + 5) : 0u;
        const float2 f0 = half2_bits_to_float2(qf[kc][0]), f1 = half2_bits_to_float2(qf[kc][1]);
        qsum_gid += f0.x + f0.y;
        qsum_gid += f1.x + f1.y;
        qf[kc][1] = hmul2_bits(qf[kc][1], 0x2c002c00u);  // x 1/16
        const float2 g1 = half2_bits_to_float2(qf[kc][1]);
        kbias_gid += f0.x + f0.y;
        kbias_gid += g1.x + g1.y;
      } else {
        // One byte a value: d as the thread reads its K words; 16-bit: as ldmatrix hands them out.
        const int d0 = L::kElemBytes == 1 ? L::k_dim(t4, 4 * kc) : 16 * kc + 2 * t4;
        const int d1 = L::kElemBytes == 1 ? d0 + 2 : d0 + 8;
        qf[kc][0] = gid < g ? q_operand<kF16>(qp + d0) : 0u;
        qf[kc][1] = gid < g ? q_operand<kF16>(qp + d1) : 0u;
      }
    }
    if constexpr (L::kI4) {
#pragma unroll
      for (int x = 1; x <= 2; x *= 2) {
        qsum_gid += __shfl_xor_sync(0xffffffffu, qsum_gid, x);
        kbias_gid += __shfl_xor_sync(0xffffffffu, kbias_gid, x);
      }
      // This thread's score columns are heads 2 t4 and 2 t4 + 1: their quads' sums.
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        qsum[e] = __shfl_sync(0xffffffffu, qsum_gid, 8 * t4 + 4 * e);
        kbias[e] = 1024.0f * __shfl_sync(0xffffffffu, kbias_gid, 8 * t4 + 4 * e);
      }
    }
  }
  const float sc = p.softmax_scale * p.k_scale[h] * kLog2e;
  // O^T = V^T · P^T (d as the MMA rows, heads as the 8 columns): half the MMAs and accumulators of
  // O = P · V, whose 16 rows would hold at most 8 heads. ot[mt] holds rows d of m-tile mt
  // (v_dim(2 mt, gid) and v_dim(2 mt + 1, gid)) for heads 2 t4 and 2 t4 + 1.
  float ot[kD / 16][4];
#pragma unroll
  for (int mt = 0; mt < kD / 16; ++mt) ot[mt][0] = ot[mt][1] = ot[mt][2] = ot[mt][3] = 0.0f;
  // Heads 2 t4 and 2 t4 + 1: the running maximum (the same in the column's 8 lanes), this lane's
  // share of the sum of p and (int4) of the sum of p times V's row minimum.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, mn[2] = {0.0f, 0.0f};
  // int4: V's codes enter O^T biased by 1024 (below); what the last step's bias added to every row
  // of ot, heads 2 t4 and 2 t4 + 1, taken out at the next rescale.
  float vbias[2] = {0.0f, 0.0f};

  for (int it = 0; it < my_steps; ++it) {
    cp_async_wait<kStages - 2>();  // this lane's copies of step it have landed
    __syncwarp();                  // ... and every lane's; step it - 1's stage is free again
    issue(it + kStages - 1, next_slot);
    next_slot = load_slot(it + kStages);
    const int t0 = start + (warp + 4 * it) * kStep;
    const unsigned char* s_k = warp_ptr + (it % kStages) * L::kStageBytes;
    const unsigned char* s_v = s_k + L::kTileBytes;
    // Each row's fp16 parameters, K's then V's (int8: a scale each; int4: a scale and a minimum).
    const uint32_t* s_par = reinterpret_cast<const uint32_t*>(s_v + L::kTileBytes);
    // The thread's tokens are gid and gid + 8 of each 16-token tile (S^T's rows). int8 keeps each
    // row's scales from here; int4 reads its pairs where they are used.
    float ks[kSub][2], vs[kSub][2];
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        ks[j][i] = vs[j][i] = 1.0f;
        if constexpr (L::kI8) {
          const float2 f = half2_bits_to_float2(s_par[16 * j + gid + 8 * i]);
          ks[j][i] = f.x;
          vs[j][i] = f.y;
        }
      }
    }

    // S^T = K · Q^T for each tile's 16 tokens (the MMA's rows; K's rows are the A operand as
    // staged) and the group's heads (its 8 columns): st[j][0], st[j][1] are token gid's scores for
    // heads 2 t4 and 2 t4 + 1, st[j][2], st[j][3] token gid + 8's. One m16n8k16 a 16-wide slice of d.
    float st[kSub][4];
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.0f;
      const unsigned char* s_kj = s_k + 16 * j * L::kRowBytes;
      if constexpr (L::kI4) {
        uint32_t w[2][L::kI4KWords];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = gid + 8 * i, byte = t4 * (kD / 8);
          const unsigned char* at = s_kj + r * L::kRowBytes + L::swizzle(r, byte / 16) * 16 + byte % 16;
          if constexpr (L::kI4KWords == 4) {
            const uint4 c = *reinterpret_cast<const uint4*>(at);
            w[i][0] = c.x, w[i][1] = c.y, w[i][2] = c.z, w[i][3] = c.w;
          } else {
            const uint2 c = *reinterpret_cast<const uint2*>(at);
            w[i][0] = c.x, w[i][1] = c.y;
          }
        }
#pragma unroll
        for (int kc = 0; kc < kD / 16; ++kc) {
          // Nibbles n0 and n0 + 1 of word kc / 2 in bits 0-7 (and 16-23).
          const int shift = 8 * (kc % 2);
          const uint32_t w0 = w[0][kc / 2] >> shift, w1 = w[1][kc / 2] >> shift;
          const uint32_t a[4] = {i4x2_biased_at<0>(w0), i4x2_biased_at<0>(w1), i4x2_biased_at<4>(w0),
                                 i4x2_biased_at<4>(w1)};
          mma_16816<kF16>(st[j], a, qf[kc][0], qf[kc][1]);
        }
      } else if constexpr (L::kFp8) {
        uint32_t w[2][L::kKChunks * 4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = gid + 8 * i;
#pragma unroll
          for (int c = 0; c < L::kKChunks; ++c) {
            const uint4 v =
                *reinterpret_cast<const uint4*>(s_kj + r * L::kRowBytes + L::swizzle(r, L::k_chunk(t4, c)) * 16);
            w[i][4 * c] = v.x;
            w[i][4 * c + 1] = v.y;
            w[i][4 * c + 2] = v.z;
            w[i][4 * c + 3] = v.w;
          }
        }
#pragma unroll
        for (int kc = 0; kc < kD / 16; ++kc) {
          uint32_t a[4];
          if constexpr (L::kI8) {
            a[0] = i8x2_to_half2<false>(w[0][kc]);
            a[1] = i8x2_to_half2<false>(w[1][kc]);
            a[2] = i8x2_to_half2<true>(w[0][kc]);
            a[3] = i8x2_to_half2<true>(w[1][kc]);
          } else {
            a[0] = Kv::half2_bits(w[0][kc]);
            a[1] = Kv::half2_bits(w[1][kc]);
            a[2] = Kv::template half2_bits<true>(w[0][kc]);
            a[3] = Kv::template half2_bits<true>(w[1][kc]);
          }
          mma_16816<kF16>(st[j], a, qf[kc][0], qf[kc][1]);
        }
      } else {
        // bf16/fp16: ldmatrix puts tokens 0-7 / 8-15 (lanes 0-7 / 8-15) of chunk 2 kc and then of
        // chunk 2 kc + 1 (lanes 16-31) in the A operand's four registers.
        const int r = lane % 16;
#pragma unroll
        for (int kc = 0; kc < kD / 16; ++kc) {
          uint32_t a[4];
          ldmatrix_x4(a, s_kj + r * L::kRowBytes + L::swizzle(r, 2 * kc + lane / 16) * 16);
          mma_16816<kF16>(st[j], a, qf[kc][0], qf[kc][1]);
        }
      }
    }
    // Online softmax of heads 2 t4 and 2 t4 + 1 (column e): each lane holds two tokens of each
    // tile, the 8 lanes of a column the rest.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int tok = 16 * j + gid + 8 * i;
        const bool valid = t0 + tok < end;
        float kmin = 0.0f;
        if constexpr (L::kI4) {
          const float2 kf = half2_bits_to_float2(s_par[2 * tok]);
          ks[j][i] = kf.x;
          kmin = kf.y;
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          // The row's scale (and minimum times the sum of q) turn q . codes into q . k; the other
          // pools' scores are q . k already (0 * qsum would not fold away: qsum may be inf).
          float qk = st[j][2 * i + e];
          if constexpr (L::kI4) {
            qk = fmaf(qk - kbias[e], ks[j][i], kmin * qsum[e]);
          } else if constexpr (L::kI8) {
            qk *= ks[j][i];
          }
          const float v = valid ? qk * sc : -INFINITY;
          st[j][2 * i + e] = v;
          mx[e] = fmaxf(mx[e], v);
        }
      }
    }
    float corr[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int x = 4; x < 32; x *= 2) mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], x));
      corr[e] = exp2_ftz(m[e] - mx[e]);  // mx is finite: every step has a valid token
      m[e] = mx[e];
      l[e] *= corr[e];
      mn[e] *= corr[e];
    }
    // int4 takes the last step's bias out in the same instruction.
    const float nb[2] = {-vbias[0] * corr[0], -vbias[1] * corr[1]};
#pragma unroll
    for (int mt = 0; mt < kD / 16; ++mt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        ot[mt][r] = L::kI4 ? fmaf(ot[mt][r], corr[r % 2], nb[r % 2]) : ot[mt][r] * corr[r % 2];
      }
    }
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float vmin = 0.0f;
        if constexpr (L::kI4) {
          const float2 vf = half2_bits_to_float2(s_par[2 * (16 * j + gid + 8 * i) + 1]);
          vs[j][i] = vf.x;
          vmin = vf.y;
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pe = exp2_ftz(st[j][2 * i + e] - mx[e]);
          st[j][2 * i + e] = pe;
          l[e] += pe;
          if constexpr (L::kI4) mn[e] = fmaf(pe, vmin, mn[e]);
        }
      }
      // O^T += V^T · P^T. P's 8 x 8 halves (tokens 0-7, 8-15 by heads) transposed by movmatrix are
      // P^T's operand: tokens 2 t4, 2 t4 + 1 (and + 8) of head gid. V's row scales fold into P
      // (int8, int4); l stays the sum of p.
      const uint32_t pb0 = movmatrix_trans(pack_operand<kF16>(st[j][0] * vs[j][0], st[j][1] * vs[j][0])),
                     pb1 = movmatrix_trans(pack_operand<kF16>(st[j][2] * vs[j][1], st[j][3] * vs[j][1]));
      constexpr int kVw = L::kI4 ? (L::kI4VBytes + 3) / 4 : L::kVWords;
      uint32_t vw[4][kVw];  // rows 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9 of tile j
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int r = 16 * j + 2 * t4 + (q4 & 1) + (q4 >> 1) * 8;
        const unsigned char* row = s_v + r * L::kRowBytes;
        if constexpr (L::kI4) {
          const int byte = gid * L::kI4VBytes;
          const unsigned char* at = row + L::swizzle(r, byte / 16) * 16 + byte % 16;
          if constexpr (kVw == 2) {
            const uint2 c = *reinterpret_cast<const uint2*>(at);
            vw[q4][0] = c.x;
            vw[q4][1] = c.y;
          } else {
            vw[q4][0] = *reinterpret_cast<const uint32_t*>(at);
          }
        } else if constexpr (L::kVWords == 2) {  // one byte a value, head dim 64: 8 bytes
          const int byte = L::v_byte(gid, 0);
          const uint2 c = *reinterpret_cast<const uint2*>(row + L::swizzle(r, byte / 16) * 16 + byte % 16);
          vw[q4][0] = c.x;
          vw[q4][1] = c.y;
        } else {
#pragma unroll
          for (int wd = 0; wd < L::kVWords; wd += 4) {
            const int byte = L::v_byte(gid, wd);
            const uint4 c = *reinterpret_cast<const uint4*>(row + L::swizzle(r, byte / 16) * 16);
            vw[q4][wd] = c.x;
            vw[q4][wd + 1] = c.y;
            vw[q4][wd + 2] = c.z;
            vw[q4][wd + 3] = c.w;
          }
        }
      }
      // Value u of two tokens' rows (q4 pair 0: tokens 2 t4, +1; pair 1: 2 t4 + 8, +9) as one operand.
      const auto pair = [&](int q4, int u) -> uint32_t {
        if constexpr (L::kI4) {
          // Value u is nibble u % 2 of byte u / 2 of the run: the two tokens' nibbles side by side,
          // biased (1024 + code, or 1024 + 16 code for the high nibbles, ot's rows gid + 8).
          const uint32_t x = vw[q4][u / 8], y = vw[q4 + 1][u / 8];
          const int byte = (u / 2) % 4;
          const uint32_t two = __byte_perm(x, y, byte | ((byte + 4) << 8));
          return u % 2 ? i4x2_biased_at<4>(two) : i4x2_biased_at<0>(two);
        }
        const uint32_t x = vw[q4][u * L::kElemBytes / 4], y = vw[q4 + 1][u * L::kElemBytes / 4];
        if constexpr (L::kFp8) {
          // The two tokens' bytes interleaved, [x0 y0 x1 y1] or [x2 y2 x3 y3] (shared by two u).
          const uint32_t two = __byte_perm(x, y, u % 4 < 2 ? 0x5140 : 0x7362);
          if constexpr (L::kI8) {
            return u % 2 ? i8x2_to_half2<true>(two) : i8x2_to_half2<false>(two);
          } else {
            return u % 2 ? Kv::template half2_bits<true>(two) : Kv::half2_bits(two);
          }
        } else {
          return __byte_perm(x, y, u % 2 ? 0x7632 : 0x5410);
        }
      };
#pragma unroll
      for (int mt = 0; mt < kD / 16; ++mt) {
        const uint32_t a[4] = {pair(0, 2 * mt), pair(0, 2 * mt + 1), pair(2, 2 * mt), pair(2, 2 * mt + 1)};
        mma_16816<kF16>(ot[mt], a, pb0, pb1);
      }
      if constexpr (L::kI4) {
        // The bias those MMAs added: 1024 times the sum of P's fp16 operands, by the same MMA.
        // An earlier tile's comes out at once so the MMAs never round against two tiles' bias;
        // the last one's leaves at the next rescale.
        constexpr uint32_t k1024 = 0x64006400u;
        float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_16816<kF16>(b, {k1024, k1024, k1024, k1024}, pb0, pb1);
        if (j + 1 < kSub) {
#pragma unroll
          for (int mt = 0; mt < kD / 16; ++mt) {
#pragma unroll
            for (int r = 0; r < 4; ++r) ot[mt][r] -= b[r % 2];
          }
        } else {
          vbias[0] = b[0];
          vbias[1] = b[1];
        }
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (L::kI4) {
    // The last step's bias out; the high nibbles' rows (1024 + 16 code) back to one code a unit.
#pragma unroll
    for (int mt = 0; mt < kD / 16; ++mt) {
      ot[mt][0] -= vbias[0];
      ot[mt][1] -= vbias[1];
      ot[mt][2] = (ot[mt][2] - vbias[0]) * 0.0625f;
      ot[mt][3] = (ot[mt][3] - vbias[1]) * 0.0625f;
    }
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
#pragma unroll
    for (int x = 4; x < 32; x *= 2) {
      l[e] += __shfl_xor_sync(0xffffffffu, l[e], x);
      if constexpr (L::kI4) mn[e] += __shfl_xor_sync(0xffffffffu, mn[e], x);
    }
  }

  // Merge the four warps' states through shared memory, un-permuting d.
  __syncthreads();
  float* s_o = reinterpret_cast<float*>(smem) + half * 4 * kMaxGroup * kD;  // [4][kMaxGroup][kD] per head
#pragma unroll
  for (int mt = 0; mt < kD / 16; ++mt) {
    float* head0 = &s_o[(warp * kMaxGroup + 2 * t4) * kD];
    float* head1 = head0 + kD;
    head0[L::v_dim(2 * mt, gid)] = ot[mt][0];
    head1[L::v_dim(2 * mt, gid)] = ot[mt][1];
    head0[L::v_dim(2 * mt + 1, gid)] = ot[mt][2];
    head1[L::v_dim(2 * mt + 1, gid)] = ot[mt][3];
  }
  if (gid == 0) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s_m[half][warp][2 * t4 + e] = m[e];
      s_l[half][warp][2 * t4 + e] = l[e];
      if constexpr (L::kI4) s_mn[half][warp][2 * t4 + e] = mn[e];
    }
  }
  __syncthreads();
  // int8/int4 under rotate_norm: an unsplit output waits behind the merge's rows for its rotation.
  const bool rotate_here = L::kRowParams && p.rotate_norm != 0.0f && w.n_split == 1;
  float* rotated = reinterpret_cast<float*>(smem) + kHeads * 4 * kMaxGroup * kD;
  if (head_ok) {
    decode_merge_warps<kD, kMaxGroup>(p, w, g, s_o, s_m[half], s_l[half], L::kI4 ? &s_mn[half][0][0] : nullptr,
                                      threadIdx.x % 128, 128, rotate_here ? rotated : nullptr);
  }
  if (rotate_here) {
    __syncthreads();
    const float* mean = p.v_mean ? p.v_mean + h * kD : nullptr;
    uint16_t* out = static_cast<uint16_t*>(p.out) + (int64_t{q_begin} * p.num_q_heads + h * g) * kD;
    for (int j = warp; j < g; j += 4) hadamard_row<kD / 32>(rotated + j * kD, mean, p.rotate_norm, out + j * kD);
  }
  if (w.n_split > 1) merge_splits_in_last_block<kD, kHeads, L::kRowParams>(p, w.b, w.n_split, g, smem);
}

}  // namespace serve8
