// The skinny FP8 GEMM for 17-64 e4m3 token rows and 33-64 bf16 ones (skinny_gemm.h). One producer
// warp streams stages of 128 weight rows and the token rows, 128 K elements each, by TMA into
// 128-byte-swizzled shared memory, each stage guarded by a full and an empty mbarrier; two consumer
// warpgroups multiply 64 weight rows each: wgmma m64nXk32 e4m3 from shared memory, or for bf16
// tokens m64nXk16 bf16 with the weights widened to bf16 in registers (exactly: e4m3 fits bf16). A
// tile's K splits are one cluster: each block leaves its sums in its own shared memory and adds a
// share of the tile from all of them.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/skinny_gemm_device.cuh"
#include "backend/cuda/skinny_gemm_tma.h"

namespace serve8 {
namespace {

constexpr int kConsumers = 2;                            // warpgroups of 64 weight rows
constexpr int kThreads = kConsumers * 128 + 32;          // and one producer warp
constexpr int kBlockK = kSkinnyTmaBlockK;                // bytes: one swizzle row
constexpr int kWeightBytes = kSkinnyTmaTileN * kBlockK;  // a stage's weights

// A stage: the weights, then the tokens' atoms of [NT rows][128 bytes] (two for bf16).
constexpr int token_atoms(bool bf16) { return bf16 ? 2 : 1; }
constexpr int stage_bytes(int nt, bool bf16) { return kWeightBytes + token_atoms(bf16) * nt * kBlockK; }
// About 110 KB of stages, two blocks an SM: ~190 KB of each SM's reads in flight.
constexpr int stages_for(int nt, bool bf16) { return std::clamp(110 * 1024 / stage_bytes(nt, bf16), 2, 8); }
// The stages, 1 KB for aligning them and the barriers.
constexpr int smem_bytes(int nt, bool bf16) {
  return stages_for(nt, bf16) * stage_bytes(nt, bf16) + 1024 + 2 * 8 * stages_for(nt, bf16);
}

struct TmaParams {
  CUtensorMap w_map;  // [N, K] bytes, boxes of 128 rows x 128 bytes
  CUtensorMap x_map;  // [M, K] e4m3 or bf16, boxes of token_tile rows x 128 bytes
  SkinnyGemmArgs a;
  int kblocks = 0, kblocks_per_split = 0, splits = 0;
  unsigned stage_tx = 0;  // bytes the two boxes bring a stage
};

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// A box of the map at (K byte c0, row c1) into shared memory, counted on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// 16 bytes of block `rank`'s shared memory at the address this block has them.
__device__ __forceinline__ float4 ld_cluster_f32x4(uint32_t addr, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

// Consumer thread t (of 256) register i holds channel 64 (t / 128) + 16 (t / 32 % 4) + (t % 32) / 4
// + 8 (i % 4 / 2) and token 8 (i / 4) + 2 (t % 4) + i % 2 (wgmma's m64nX accumulator layout).
__device__ __forceinline__ void store_out(const SkinnyGemmArgs& a, int64_t row0, int t, int i, float v) {
  const int e = i & 3, lane = t & 31;
  const int64_t ch = row0 + 64 * (t >> 7) + 16 * ((t >> 5) & 3) + (lane >> 2) + 8 * (e >> 1);
  store_scaled(a, ch, 8 * (i >> 2) + 2 * (lane & 3) + (e & 1), v);
}

template <int NT, bool BF16>
__global__ void __launch_bounds__(kThreads) skinny_fp8_gemm_tma_kernel(const __grid_constant__ TmaParams p) {
  constexpr int kStages = stages_for(NT, BF16), kStageBytes = stage_bytes(NT, BF16), kRegs = NT / 2;
  extern __shared__ uint8_t smem_raw[];
  // Swizzled boxes need 1024-byte alignment; the barriers follow the stages.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem = (raw + 1023u) & ~1023u;
  float* const sums = reinterpret_cast<float*>(smem_raw + (smem - raw));
  const uint32_t full = smem + kStages * kStageBytes, empty = full + 8 * kStages;
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5;
  const int tile = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.z);
  const int kb0 = split * p.kblocks_per_split;
  const int nkb = max(0, min(p.kblocks_per_split, p.kblocks - kb0));
  const int row0 = tile * kSkinnyTmaTileN;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  allow_dependent_launch();

  float d[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) d[i] = 0.0f;

  if (warp == kConsumers * 4) {
    if ((tid & 31) == 0) {
      // Weights are never written by a step: the first stages' are requested before waiting for
      // the kernel before this one (programmatic launch), the tokens after.
      const int first = min(kStages, nkb);
      for (int s = 0; s < first; ++s) {
        mbar_expect(full + 8 * s, p.stage_tx);
        tma_load(smem + s * kStageBytes, &p.w_map, (kb0 + s) * kBlockK, row0, full + 8 * s);
      }
      asm volatile("griddepcontrol.wait;\n" ::: "memory");
      // A stage's K elements: one 128-byte box of e4m3 tokens, two of bf16.
      const auto load_tokens = [&](uint32_t st, int kb, uint32_t bar) {
#pragma unroll
        for (int j = 0; j < token_atoms(BF16); ++j)
          tma_load(st + kWeightBytes + j * NT * kBlockK, &p.x_map, kb * kBlockK + j * (kBlockK / 2), 0, bar);
      };
      for (int s = 0; s < first; ++s) load_tokens(smem + s * kStageBytes, kb0 + s, full + 8 * s);
      for (int i = kStages; i < nkb; ++i) {
        const int s = i % kStages;
        const uint32_t st = smem + s * kStageBytes;
        mbar_wait(empty + 8 * s, ((i / kStages) + 1) & 1);
        mbar_expect(full + 8 * s, p.stage_tx);
        tma_load(st, &p.w_map, (kb0 + i) * kBlockK, row0, full + 8 * s);
        load_tokens(st, kb0 + i, full + 8 * s);
      }
    }
  } else {
    // The output may still be read by the kernel before this one.
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const int wg = warp >> 2;
    for (int i = 0; i < nkb; ++i) {
      const int s = i % kStages;
      const uint32_t st = smem + s * kStageBytes;
      mbar_wait(full + 8 * s, (i / kStages) & 1);
      if constexpr (BF16) {
        multiply_bf16_stage<NT, kBlockK / 16>(d, st + wg * 64 * kBlockK, 0, st + kWeightBytes);
      } else {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kBlockK / 32; ++kk)
          wgmma_e4m3<NT>(d, smem_desc(st + wg * 64 * kBlockK + kk * 32), smem_desc(st + kWeightBytes + kk * 32));
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      if ((tid & 127) == 0) mbar_arrive(empty + 8 * s);
    }
  }

  const int t = tid;  // consumer thread index where t < 256
  if (p.splits == 1) {
    if (t < kConsumers * 128) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) store_out(p.a, row0, t, i, d[i]);
    }
    return;
  }
  // Every stage has been multiplied: its memory holds the sums, [register][consumer thread].
  __syncthreads();
  constexpr int kTile = kRegs * kConsumers * 128;
  if (t < kConsumers * 128) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) sums[i * kConsumers * 128 + t] = d[i];
  }
  cluster_sync();
  // Block `split` of the cluster adds its share of the tile over the splits, in split order, four
  // floats at a time; every split's are requested before the first is added.
  constexpr int kVecs = kTile / 4;
  const int share = (kVecs + p.splits - 1) / p.splits;
  const int end = min(kVecs, (split + 1) * share);
  for (int v = split * share + tid; v < end; v += kThreads) {
    float4 part[kSkinnyTmaMaxSplits];
#pragma unroll
    for (int s = 0; s < kSkinnyTmaMaxSplits; ++s)
      if (s < p.splits) part[s] = ld_cluster_f32x4(smem + 16 * v, static_cast<unsigned>(s));
    float4 sum = part[0];
#pragma unroll
    for (int s = 1; s < kSkinnyTmaMaxSplits; ++s) {
      if (s < p.splits) {
        sum.x += part[s].x;
        sum.y += part[s].y;
        sum.z += part[s].z;
        sum.w += part[s].w;
      }
    }
    const float sums4[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int idx = 4 * v + e;
      store_out(p.a, row0, idx % (kConsumers * 128), idx / (kConsumers * 128), sums4[e]);
    }
  }
  // No block leaves while another still reads its shared memory.
  cluster_sync();
}

// The driver's tensor map encoder, or null (then every launch is refused and cuBLASLt runs).
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A row-major [rows, k] matrix of 1- or 2-byte elements in boxes of box_rows x 128 bytes, 128-byte
// swizzled; rows and K past the matrix read as zeros. A box is never taller than the matrix: the
// rows a tile has beyond it are left as they were and reach only outputs that are not written.
bool encode(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int box_rows, int elem_bytes) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k * elem_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBlockK / elem_bytes), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t unit[2] = {1, 1};
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  return fn && fn(map, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                  const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int NT, bool BF16>
int prepare() {
  return resident_blocks(skinny_fp8_gemm_tma_kernel<NT, BF16>, kThreads, smem_bytes(NT, BF16));
}

template <int NT, bool BF16>
void launch(const TmaParams& p, const SkinnyGemmPlan& plan, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(plan.tiles_n), 1, static_cast<unsigned>(plan.splits));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem_bytes(NT, BF16);
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = 1;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = static_cast<unsigned>(plan.splits);
  config.attrs = attrs;
  config.numAttrs = plan.splits > 1 ? 2 : 1;  // an unsplit tile needs no cluster
  SERVE8_CUDA_CHECK(cudaLaunchKernelEx(&config, skinny_fp8_gemm_tma_kernel<NT, BF16>, p));
}

}  // namespace

int prepare_skinny_tma(bool x_bf16) {
  return x_bf16 ? prepare<64, true>() : std::min(prepare<32, false>(), prepare<64, false>());
}

bool run_skinny_tma(const SkinnyGemmArgs& a, const SkinnyGemmPlan& plan, cudaStream_t stream) {
  if (!plan.tma || (a.x_bf16 ? plan.token_tile != 64 : !a.x_scale) || a.m < 1 || a.m > plan.token_tile || a.n < 1 ||
      plan.splits < 1 || plan.splits > kSkinnyTmaMaxSplits || a.k < kBlockK || a.k % 16 != 0)
    return false;
  TmaParams p;
  const int w_rows = static_cast<int>(std::min<int64_t>(kSkinnyTmaTileN, a.n));
  const int x_rows = static_cast<int>(std::min<int64_t>(plan.token_tile, a.m));
  const int x_bytes = a.x_bf16 ? 2 : 1;
  if (!encode(&p.w_map, a.w, a.n, a.k, w_rows, 1) || !encode(&p.x_map, a.x, a.m, a.k, x_rows, x_bytes)) return false;
  p.stage_tx = static_cast<unsigned>((w_rows + x_bytes * x_rows) * kBlockK);
  p.a = a;
  p.kblocks = plan.kblocks;
  p.kblocks_per_split = plan.kblocks_per_split;
  p.splits = plan.splits;
  if (a.x_bf16) {
    launch<64, true>(p, plan, stream);
  } else if (plan.token_tile == 32) {
    launch<32, false>(p, plan, stream);
  } else {
    launch<64, false>(p, plan, stream);
  }
  return true;
}

}  // namespace serve8
