// The skinny FP8 GEMM: a few rows (M <= 8) against a weight matrix read once, on the tensor cores
// (mma.sync m16n8k32 e4m3, fp32 accumulators). The weight is the MMA's A operand (16 of its rows
// per warp), the activations its B operand (one tile of 8 tokens). Each lane loads 16 or 32 consecutive bytes of a row per step; since a
// dot product does not care in which order K is summed, A and B take those bytes in the same
// permuted K order and no shuffle is needed. K is split across blocks until every SM streams;
// the partial sums meet in a workspace, added in slice order by the last block of each row tile.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/fp8_gemm_plan.h"
#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kWarps = kFp8SkinnyRowsPerBlock / 16;

template <int N>
__device__ __forceinline__ void load_stream(const uint8_t* p, uint4 (&v)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[i].x), "=r"(v[i].y), "=r"(v[i].z), "=r"(v[i].w)
                 : "l"(p + 16 * i));
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// acc += A (16 x 32) · B (32 x 8); a: rows g, g + 8 at K 0-15, then 16-31 (PTX's fragment order).
__device__ __forceinline__ void mma_e4m3(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store_out(const Fp8SkinnyParams& p, int token, int row, float sum) {
  float b = 0.0f;
  if (p.bias)
    b = p.bias_f32 ? static_cast<const float*>(p.bias)[row]
                   : bf16_bits_to_float(static_cast<const uint16_t*>(p.bias)[row]);
  const float r = sum * p.x_scale[token] * p.w_scale[row] + b;
  const int64_t i = static_cast<int64_t>(token) * p.n + row;
  if (p.out_f32) {
    static_cast<float*>(p.out)[i] = r;
  } else {
    static_cast<uint16_t*>(p.out)[i] = float_to_bf16_bits(r);
  }
}

// LaneBytes: bytes of K per lane per row per step.
template <int LaneBytes>
__global__ void __launch_bounds__(kWarps * 32) fp8_skinny_kernel(const Fp8SkinnyParams p, const int splits) {
  constexpr int kTiles = 1;  // M <= 8: one MMA tile of tokens
  constexpr int kVecs = LaneBytes / 16;        // 16-byte loads per row per step
  constexpr int kMmas = LaneBytes / 8;         // k32 MMAs per step (8 bytes of each lane's each)
  constexpr int kStepBytes = 4 * LaneBytes;    // K per step: the 4 lanes of a row side by side
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * kFp8SkinnyRowsPerBlock + warp * 16;
  const int steps = p.k / kStepBytes;
  const int s_begin = static_cast<int>(int64_t{steps} * blockIdx.y / splits);
  const int s_end = static_cast<int>(int64_t{steps} * (blockIdx.y + 1) / splits);
  // Rows and tokens past the ends read the last one and are never stored.
  const int64_t ra = min(row0 + g, p.n - 1), rb = min(row0 + g + 8, p.n - 1);
  const uint8_t* wa = p.w + ra * p.k + t * LaneBytes;
  const uint8_t* wb = p.w + rb * p.k + t * LaneBytes;
  const uint8_t* xr[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) xr[j] = p.x + int64_t{min(8 * j + g, p.m - 1)} * p.k + t * LaneBytes;

  float acc[kTiles][4] = {};
  uint4 a[kVecs], b[kVecs];
  if (s_begin < s_end) {
    load_stream(wa + int64_t{s_begin} * kStepBytes, a);
    load_stream(wb + int64_t{s_begin} * kStepBytes, b);
  }
  for (int s = s_begin; s < s_end; ++s) {
    // The next step's weights are in flight while this step's MMAs run.
    uint4 na[kVecs], nb[kVecs];
    if (s + 1 < s_end) {
      load_stream(wa + int64_t{s + 1} * kStepBytes, na);
      load_stream(wb + int64_t{s + 1} * kStepBytes, nb);
    }
    const int64_t off = int64_t{s} * kStepBytes;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      uint4 xv[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) xv[i] = __ldg(reinterpret_cast<const uint4*>(xr[j] + off) + i);
#pragma unroll
      for (int mm = 0; mm < kMmas; ++mm) {
        const int v = mm / 2, w0 = 2 * (mm % 2);
        mma_e4m3(acc[j], word(a[v], w0), word(b[v], w0), word(a[v], w0 + 1), word(b[v], w0 + 1), word(xv[v], w0),
                 word(xv[v], w0 + 1));
      }
    }
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      a[i] = na[i];
      b[i] = nb[i];
    }
  }

  // acc[j]: rows row0 + g (0, 1) and row0 + g + 8 (2, 3), tokens 8j + 2t (0, 2) and 8j + 2t + 1 (1, 3).
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = 8 * j + 2 * t + (e & 1), row = row0 + g + 8 * (e >> 1);
        if (token < p.m && row < p.n) store_out(p, token, row, acc[j][e]);
      }
    return;
  }
  float* part = p.ws + int64_t{blockIdx.y} * p.m * p.n;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * j + 2 * t + (e & 1), row = row0 + g + 8 * (e >> 1);
      if (token < p.m && row < p.n) __stcg(part + int64_t{token} * p.n + row, acc[j][e]);
    }
  // The last slice to arrive adds all slices' partials in slice order (the same sums every run).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.counters + blockIdx.x, 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int tile0 = blockIdx.x * kFp8SkinnyRowsPerBlock;
  for (int i = threadIdx.x; i < p.m * kFp8SkinnyRowsPerBlock; i += blockDim.x) {
    const int token = i / kFp8SkinnyRowsPerBlock, row = tile0 + i % kFp8SkinnyRowsPerBlock;
    if (row >= p.n) continue;
    float sum = 0.0f;
    for (int sl = 0; sl < splits; ++sl) sum += __ldcg(p.ws + (int64_t{sl} * p.m + token) * p.n + row);
    store_out(p, token, row, sum);
  }
  if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;
}

}  // namespace

void launch_fp8_skinny(const Fp8SkinnyParams& p, const Fp8SkinnyPlan& plan, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  const dim3 grid(static_cast<unsigned>(plan.row_tiles), static_cast<unsigned>(plan.splits));
  if (plan.lane_bytes == 32) {
    fp8_skinny_kernel<32><<<grid, kWarps * 32, 0, stream>>>(p, plan.splits);
  } else {
    fp8_skinny_kernel<16><<<grid, kWarps * 32, 0, stream>>>(p, plan.splits);
  }
  SERVE8_CUDA_CHECK_LAUNCH("fp8_skinny_kernel");
}

}  // namespace serve8
