// FP8 (e4m3) rows for the FP8 GEMMs: per-row quantization (weights at load, activations per token),
// the scales and bias after an unscaled cuBLASLt GEMM, and a GEMV for one row (decode at batch 1),
// where cuBLASLt's tensor-core tiles leave the weights' bandwidth unused.
#include <algorithm>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kQuantThreads = 256;

// One block per row: the row's max |x|, then the codes, 8 elements per access where the row allows.
// The arithmetic is the CPU backend's (x * (448 / amax), core/dtype.h's rounding), so both write
// the same bytes.
template <typename T>
__global__ void quantize_fp8_rows_kernel(const Fp8QuantParams p) {
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + row * p.cols;
  uint8_t* q = p.q + row * p.cols;
  const bool vec = p.cols % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0 &&
                   (reinterpret_cast<uintptr_t>(q) & 7u) == 0;
  float amax = 0.0f;
  if (vec) {
    for (int64_t j = 8 * threadIdx.x; j < p.cols; j += 8 * blockDim.x) {
      float f[8];
      Act<T>::load8(x + j, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) amax = fmaxf(amax, fabsf(Act<T>::load(x + j)));
  }
  __shared__ float warp_max[kQuantThreads / 32];
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int w = 0; w < kQuantThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float inv = fp8_row_inv(amax);
  if (vec) {
    for (int64_t j = 8 * threadIdx.x; j < p.cols; j += 8 * blockDim.x) {
      float f[8];
      Act<T>::load8(x + j, f);
      store_e4m3x8(q + j, f, inv);
    }
  } else {
    for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) q[j] = f32_to_e4m3(Act<T>::load(x + j) * inv);
  }
  if (threadIdx.x == 0) p.scale[row] = fp8_row_scale(amax);
}

__global__ void fp8_scale_kernel(const Fp8ScaleParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.cols, c = i % p.cols;
    float b = 0.0f;
    if (p.bias)
      b = p.bias_f32 ? static_cast<const float*>(p.bias)[c]
                     : bf16_bits_to_float(static_cast<const uint16_t*>(p.bias)[c]);
    const float s = p.x_scale[r] * p.w_scale[c];
    if (p.out_f32) {
      float* o = static_cast<float*>(p.out) + i;
      *o = *o * s + b;
    } else {
      uint16_t* o = static_cast<uint16_t*>(p.out) + i;
      *o = float_to_bf16_bits(bf16_bits_to_float(*o) * s + b);
    }
  }
}

constexpr int kGemvWarps = 8;

// Sixteen e4m3 codes widened to fp32 (exactly), as the attention kernels widen FP8 KV.
__device__ __forceinline__ void widen16(const uint4& v, float (&f)[16]) {
  float lo[8], hi[8];
  KvTraits<DType::kFP8E4M3>::to_float8(uint2{v.x, v.y}, lo);
  KvTraits<DType::kFP8E4M3>::to_float8(uint2{v.z, v.w}, hi);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    f[i] = lo[i];
    f[8 + i] = hi[i];
  }
}

// A warp per output row: each lane streams 16 weight bytes at a time (read once, not kept in L1)
// against the M input rows, which every warp shares through L1; fp32 sums, then the scales.
template <int M>
__global__ void __launch_bounds__(kGemvWarps * 32) fp8_gemv_kernel(const Fp8GemvParams p) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;
  const uint4* w = reinterpret_cast<const uint4*>(p.w + row * p.k);
  const int chunks = static_cast<int>(p.k / 16);
  float acc[M] = {};
#pragma unroll 4
  for (int c = lane; c < chunks; c += 32) {
    uint4 wv;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(wv.x), "=r"(wv.y), "=r"(wv.z), "=r"(wv.w)
                 : "l"(w + c));
    float wf[16];
    widen16(wv, wf);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[16];
      widen16(__ldg(reinterpret_cast<const uint4*>(p.x + m * p.k) + c), xf);
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[m] = fmaf(wf[i], xf[i], acc[m]);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      float b = 0.0f;
      if (p.bias)
        b = p.bias_f32 ? static_cast<const float*>(p.bias)[row]
                       : bf16_bits_to_float(static_cast<const uint16_t*>(p.bias)[row]);
      const float r = v * p.x_scale[m] * p.w_scale[row] + b;
      if (p.out_f32) {
        static_cast<float*>(p.out)[m * p.n + row] = r;
      } else {
        static_cast<uint16_t*>(p.out)[m * p.n + row] = float_to_bf16_bits(r);
      }
    }
  }
}

}  // namespace

void launch_fp8_gemv(const Fp8GemvParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  const unsigned blocks = static_cast<unsigned>((p.n + kGemvWarps - 1) / kGemvWarps);
  static_assert(kFp8GemvMaxRows == 1, "instantiate fp8_gemv_kernel for every row count it takes");
  fp8_gemv_kernel<1><<<blocks, kGemvWarps * 32, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("fp8_gemv_kernel");
}

void launch_quantize_fp8_rows(const Fp8QuantParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.dtype == DType::kF32) {
    quantize_fp8_rows_kernel<float><<<static_cast<unsigned>(p.rows), kQuantThreads, 0, stream>>>(p);
  } else {
    quantize_fp8_rows_kernel<uint16_t><<<static_cast<unsigned>(p.rows), kQuantThreads, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("quantize_fp8_rows_kernel");
}

void launch_fp8_scale(const Fp8ScaleParams& p, cudaStream_t stream) {
  const int64_t n = p.rows * p.cols;
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65535 * 8);
  fp8_scale_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("fp8_scale_kernel");
}

}  // namespace serve8
