// The skinny FP8 GEMM (skinny_gemm.h). A block of one warpgroup computes 64 output channels x
// token_tile tokens over its K range: cp.async streams 64 weight rows x 256 bytes and the token
// rows' 256 elements per stage into 128-byte-swizzled shared memory (atoms of [rows][128 bytes]).
// e4m3 tokens: wgmma m64nXk32 e4m3 multiplies from there. bf16 tokens: each thread widens its
// part of the weights to bf16 registers and wgmma m64nXk16 bf16 takes them with the tokens' atoms.
// bf16 weights (W16): 128 elements a stage of both, wgmma m64nXk16 bf16 from shared memory alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/skinny_gemm_device.cuh"
#include "backend/cuda/skinny_gemm_tma.h"

namespace serve8 {
namespace {

constexpr int kThreads = 128;
constexpr int kAtomBytes = 128;  // one swizzle row: 128 K bytes
constexpr int kAtoms = kSkinnyBlockK / kAtomBytes;
constexpr int kMaxTiles = 65535;  // channel tiles: the grid's y
// (channel tile, token tile) pairs, each with a counter: at most 64 bf16 rows in 32-row tiles.
constexpr int kMaxSlots = kSkinnyMaxRowsBf16 / kSkinnyTokenTiles[kSkinnyTokenTileCount - 1] * kMaxTiles;

// Token bytes a weight byte of the stage: 2 for bf16 tokens against e4m3 weights, else 1.
constexpr int token_ratio(bool bf16, bool w16) { return bf16 && !w16 ? 2 : 1; }
// A stage: the weight atoms (64 rows x 128 bytes each), then the token atoms (twice as many for
// bf16 tokens against e4m3 weights).
constexpr int stage_bytes(int nt, bool bf16, bool w16) {
  return kAtoms * (kSkinnyTileN + nt * token_ratio(bf16, w16)) * kAtomBytes;
}
// Stages in about 110 KB, so that two blocks share an SM with 80-90 KB of weights each in flight
// (bench_gemm swept 128-512 K bytes a stage and 64 or 128 channels a block: this one streamed best).
constexpr int stages_for(int nt, bool bf16, bool w16) {
  return std::clamp(110 * 1024 / stage_bytes(nt, bf16, w16), 2, 8);
}
constexpr int smem_bytes(int nt, bool bf16, bool w16) {
  return stages_for(nt, bf16, w16) * stage_bytes(nt, bf16, w16) + 1024;
}

struct KernelParams {
  SkinnyGemmArgs a;
  int kblocks = 0, kblocks_per_split = 0, splits = 0;
  float* partials = nullptr;
  unsigned* counters = nullptr;
};

// 16 bytes global -> shared, zero-filled where the source is outside the matrix.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// Stages of each weight row a block asks into L2 past those it loads into shared memory, before
// waiting for the kernel ahead (a norm, SiLU or decode attention that leaves DRAM idle): with two
// blocks an SM, about 17 MB over the GPU, a third of the L2.
constexpr int kL2AheadStages = 4;

// Row r's 16-byte chunk c of a 128-byte swizzle row lands at chunk c ^ (r % 8).
__device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return static_cast<uint32_t>(r * kAtomBytes + ((c ^ (r & 7)) << 4));
}

// Weights: 64 rows x 16 chunks, consecutive threads along a row; rows of row_bytes, k0 in bytes.
__device__ __forceinline__ void load_weights(const SkinnyGemmArgs& a, int64_t row_bytes, uint32_t stage, int64_t row0,
                                             int64_t k0) {
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kChunks = kSkinnyBlockK / 16;
#pragma unroll
  for (int j = 0; j < kSkinnyTileN * kChunks / kThreads; ++j) {
    const int i = tid + j * kThreads, r = i / kChunks, c = i % kChunks;
    const int64_t row = row0 + r, col = k0 + c * 16;
    const bool ok = row < a.n && col < row_bytes;
    cp_async16(stage + (c >> 3) * (kSkinnyTileN * kAtomBytes) + swizzled(r, c & 7),
               ok ? a.w + row * row_bytes + col : a.w, ok);
  }
}

// Tokens: NT rows of the stage's elements from element k0 (e4m3 weights: 256, 16 chunks a row of
// e4m3 tokens and 32 of bf16; bf16 weights: 128, 16 chunks), consecutive threads along a row.
template <int NT, bool BF16, bool W16>
__device__ __forceinline__ void load_tokens(const SkinnyGemmArgs& a, uint32_t stage, int64_t tok0, int64_t k0) {
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kBytes = BF16 ? 2 : 1, kChunks = kSkinnyBlockK * token_ratio(BF16, W16) / 16;
  const uint32_t base = stage + kAtoms * kSkinnyTileN * kAtomBytes;
  const uint8_t* x = static_cast<const uint8_t*>(a.x);
#pragma unroll
  for (int j = 0; j < (NT * kChunks + kThreads - 1) / kThreads; ++j) {
    const int i = tid + j * kThreads, r = i / kChunks, c = i % kChunks;
    if (i < NT * kChunks) {
      const int64_t col = k0 + c * (16 / kBytes);
      const bool ok = tok0 + r < a.m && col < a.k;
      cp_async16(base + (c >> 3) * (NT * kAtomBytes) + swizzled(r, c & 7),
                 ok ? x + ((tok0 + r) * a.k + col) * kBytes : x, ok);
    }
  }
}

template <int NT, bool BF16, bool W16>
__global__ void __launch_bounds__(kThreads) skinny_fp8_gemm_kernel(const KernelParams p) {
  static_assert(BF16 || !W16, "bf16 weights take bf16 tokens");
  constexpr int kStages = stages_for(NT, BF16, W16);
  constexpr int kStageBytes = stage_bytes(NT, BF16, W16);
  constexpr int kElemsPerStage = W16 ? kSkinnyBlockK / 2 : kSkinnyBlockK;
  constexpr int kRegs = NT / 2;  // accumulators per thread
  extern __shared__ uint8_t smem_raw[];
  // Swizzled operands need 1024-byte-aligned 8-row groups.
  const uint32_t smem = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const SkinnyGemmArgs& a = p.a;
  // The token tiles of one channel tile are neighbours in the grid: they read its weights together.
  const int tt = static_cast<int>(blockIdx.x), tile = static_cast<int>(blockIdx.y),
            split = static_cast<int>(blockIdx.z);
  const int slot = tile * static_cast<int>(gridDim.x) + tt;  // its counter and partial sums
  const int64_t row0 = int64_t{tile} * kSkinnyTileN, tok0 = int64_t{tt} * NT;
  const int kb0 = split * p.kblocks_per_split;
  const int nkb = max(0, min(p.kblocks_per_split, p.kblocks - kb0));
  const int64_t row_bytes = W16 ? 2 * a.k : a.k;

  allow_dependent_launch();
  // Weights are never written by a step: their first stages are read before waiting for the
  // kernel before this one (programmatic launch), everything else after.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < nkb) load_weights(a, row_bytes, smem + s * kStageBytes, row0, int64_t{kb0 + s} * kSkinnyBlockK);
  if (tt == 0 && nkb > kStages - 1 && threadIdx.x < kSkinnyTileN && row0 + threadIdx.x < a.n) {
    // One thread a row: the next stages' bytes of it are contiguous (16-byte multiples, as K is).
    const int64_t col = int64_t{kb0 + kStages - 1} * kSkinnyBlockK;
    const int64_t bytes = min(int64_t{min(nkb - (kStages - 1), kL2AheadStages)} * kSkinnyBlockK, row_bytes - col);
    if (bytes > 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a.w + (row0 + threadIdx.x) * row_bytes + col),
                   "r"(static_cast<uint32_t>(bytes))
                   : "memory");
  }
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nkb) load_tokens<NT, BF16, W16>(a, smem + s * kStageBytes, tok0, int64_t{kb0 + s} * kElemsPerStage);
    asm volatile("cp.async.commit_group;\n" ::);
  }

  float d[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) d[i] = 0.0f;

  for (int i = 0; i < nkb; ++i) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2));
    // cp.async wrote through the generic proxy; the tensor cores read through the async one.
    asm volatile("fence.proxy.async.shared::cta;\n" ::);
    __syncthreads();
    const int next = i + kStages - 1;
    if (next < nkb) {
      const uint32_t st = smem + (next % kStages) * kStageBytes;
      load_weights(a, row_bytes, st, row0, int64_t{kb0 + next} * kSkinnyBlockK);
      load_tokens<NT, BF16, W16>(a, st, tok0, int64_t{kb0 + next} * kElemsPerStage);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    const uint32_t stage = smem + (i % kStages) * kStageBytes;
    if constexpr (BF16 && !W16) {
      multiply_bf16_stage<NT, kSkinnyBlockK / 16>(d, stage, kSkinnyTileN * kAtomBytes,
                                                  stage + kAtoms * kSkinnyTileN * kAtomBytes);
    } else {
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int atom = 0; atom < kAtoms; ++atom) {
#pragma unroll
        for (int kk = 0; kk < kAtomBytes / 32; ++kk) {
          const uint64_t dw = smem_desc(stage + atom * (kSkinnyTileN * kAtomBytes) + kk * 32);
          const uint64_t dx =
              smem_desc(stage + kAtoms * kSkinnyTileN * kAtomBytes + atom * (NT * kAtomBytes) + kk * 32);
          if constexpr (W16) {
            wgmma_bf16_ss<NT>(d, dw, dx);
          } else {
            wgmma_e4m3<NT>(d, dw, dx);
          }
        }
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  asm volatile("cp.async.wait_group 0;\n" ::);

  const int tid = static_cast<int>(threadIdx.x);
  if (p.splits > 1) {
    // Partials in the accumulators' own order (register i of thread t at [i][t]): the last
    // block of the tile reads back exactly the registers each split held, in split order.
    constexpr int kTileFloats = kRegs * kThreads;
    float* mine = p.partials + (int64_t{slot} * p.splits + split) * kTileFloats;
#pragma unroll
    for (int i = 0; i < kRegs; ++i) __stcg(mine + i * kThreads + tid, d[i]);
    __threadfence();
    __syncthreads();
    __shared__ unsigned last;
    if (tid == 0) last = atomicAdd(p.counters + slot, 1u) == static_cast<unsigned>(p.splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    float sum[kRegs] = {};
    for (int s = 0; s < p.splits; ++s) {
      const float* part = p.partials + (int64_t{slot} * p.splits + s) * kTileFloats;
#pragma unroll
      for (int i = 0; i < kRegs; ++i) sum[i] += s == split ? d[i] : __ldcg(part + i * kThreads + tid);
    }
#pragma unroll
    for (int i = 0; i < kRegs; ++i) d[i] = sum[i];
    if (tid == 0) p.counters[slot] = 0;  // ready for the next launch
  }

  // Accumulator layout of m64nX: register 4j+e of lane l in warp w is channel
  // 16w + l/4 + 8*(e/2), token 8j + 2*(l%4) + e%2.
  const int warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int e = i & 3, j = i >> 2;
    const int64_t ch = row0 + warp * 16 + (lane >> 2) + 8 * (e >> 1);
    store_scaled(a, ch, tok0 + 8 * j + 2 * (lane & 3) + (e & 1), d[i]);
  }
}

template <int NT, bool BF16, bool W16 = false>
void launch(const KernelParams& p, const SkinnyGemmPlan& plan, cudaStream_t stream) {
  launch_dependent(skinny_fp8_gemm_kernel<NT, BF16, W16>,
                   dim3(static_cast<unsigned>(plan.token_tiles), static_cast<unsigned>(plan.tiles_n),
                        static_cast<unsigned>(plan.splits)),
                   dim3(kThreads), smem_bytes(NT, BF16, W16), stream, p);
}

template <int NT, bool BF16, bool W16 = false>
int prepare() {
  return resident_blocks(skinny_fp8_gemm_kernel<NT, BF16, W16>, kThreads, smem_bytes(NT, BF16, W16));
}

}  // namespace

SkinnyGemm::SkinnyGemm(int sms, size_t workspace_bytes) : sms_(sms), workspace_bytes_(workspace_bytes) {
  static_assert(kSkinnyTokenTileCount == 3 && kSkinnyMaxRows == 16, "prepare every token tile built");
  blocks_per_sm_[0][0] = prepare<8, false>();
  blocks_per_sm_[0][1] = prepare<16, false>();
  blocks_per_sm_[1][0] = prepare<8, true>();
  blocks_per_sm_[1][1] = prepare<16, true>();
  blocks_per_sm_[1][2] = prepare<32, true>();
  blocks_per_sm_[2][0] = prepare<8, true, true>();
  blocks_per_sm_[2][1] = prepare<16, true, true>();
  tma_blocks_per_sm_[0] = prepare_skinny_tma(false);
  tma_blocks_per_sm_[1] = prepare_skinny_tma(true);
  SERVE8_CUDA_CHECK(cudaMalloc(&partials_, workspace_bytes_));
  SERVE8_CUDA_CHECK(cudaMalloc(&counters_, kMaxSlots * sizeof(unsigned)));
  SERVE8_CUDA_CHECK(cudaMemset(counters_, 0, kMaxSlots * sizeof(unsigned)));
}

SkinnyGemm::~SkinnyGemm() {
  cudaFree(partials_);
  cudaFree(counters_);
}

SkinnyGemmPlan SkinnyGemm::plan(int64_t m, int64_t n, int64_t k, bool x_bf16, bool w_bf16) const {
  SkinnyGemmShape shape;
  shape.sms = sms_;
  shape.max_workspace_bytes = workspace_bytes_;
  if (w_bf16) {  // K blocks count weight bytes; no TMA kernel
    if (!x_bf16) return {};
    shape.blocks_per_sm = blocks_per_sm_[2][skinny_token_tile_index(m)];
    shape.max_rows = kSkinnyMaxRows;
    return plan_skinny_gemm(m, n, 2 * k, shape);
  }
  shape.blocks_per_sm = blocks_per_sm_[x_bf16 ? 1 : 0][skinny_token_tile_index(m)];
  shape.max_rows = x_bf16 ? kSkinnyMaxRowsBf16 : kSkinnyMaxRows;
  shape.tma_blocks_per_sm = tma_blocks_per_sm_[x_bf16 ? 1 : 0];
  // bf16 tokens: the 32-row tile streams well (bench_gemm); two of them past 32 rows do not.
  shape.tma_min_rows = x_bf16 ? 33 : kSkinnyMaxRows + 1;
  return plan_skinny_gemm(m, n, k, shape);
}

bool SkinnyGemm::run(const SkinnyGemmArgs& args, cudaStream_t stream) {
  return run(args, plan(args.m, args.n, args.k, args.x_bf16, args.w_bf16), stream);
}

bool SkinnyGemm::run(const SkinnyGemmArgs& args, const SkinnyGemmPlan& plan, cudaStream_t stream) {
  const bool bf16 = args.x_bf16, w16 = args.w_bf16;
  if (w16 && (!bf16 || plan.tma)) return false;
  if (plan.tma) return run_skinny_tma(args, plan, stream);
  if (plan.token_tile == 0 || plan.token_tiles < 1 || plan.tiles_n > kMaxTiles ||
      int64_t{plan.tiles_n} * plan.token_tiles > kMaxSlots || plan.workspace_bytes > workspace_bytes_ ||
      int64_t{plan.token_tile} * plan.token_tiles > (bf16 && !w16 ? kSkinnyMaxRowsBf16 : kSkinnyMaxRows))
    return false;
  KernelParams p;
  p.a = args;
  p.kblocks = plan.kblocks;
  p.kblocks_per_split = plan.kblocks_per_split;
  p.splits = plan.splits;
  p.partials = partials_;
  p.counters = counters_;
  if (w16) {
    plan.token_tile == 8 ? launch<8, true, true>(p, plan, stream) : launch<16, true, true>(p, plan, stream);
    return true;
  }
  switch (plan.token_tile) {
    case 8:
      bf16 ? launch<8, true>(p, plan, stream) : launch<8, false>(p, plan, stream);
      break;
    case 16:
      bf16 ? launch<16, true>(p, plan, stream) : launch<16, false>(p, plan, stream);
      break;
    default:
      launch<32, true>(p, plan, stream);
      break;
  }
  return true;
}

}  // namespace serve8
