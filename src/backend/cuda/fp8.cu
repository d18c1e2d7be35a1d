// FP8 (e4m3) rows for the FP8 GEMMs: per-row quantization (weights at load, activations per token),
// the scales and bias after an unscaled cuBLASLt GEMM, and weight-only matrices widened.
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
  allow_dependent_launch();
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + row * p.cols;
  uint8_t* q = p.q + row * p.cols;
  const bool vec = p.cols % 8 == 0 && aligned16(x) && (reinterpret_cast<uintptr_t>(q) & 7u) == 0;
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

// One element a thread, for outputs, scales or bias not 16-byte aligned (cuBLASLt takes e4m3 only
// with N a multiple of 16, so the columns always come in eights).
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

// The same arithmetic, 8 columns a thread and a row a grid row (blockIdx.y): the element loop's
// 64-bit division and one-element accesses had made a 64-row decode step's 128 calls take ~5 us
// each. Rows, scales and bias 16-byte aligned, cols a multiple of 8.
template <typename T>
__global__ void fp8_scale_vec_kernel(const Fp8ScaleParams p) {
  const int64_t r = blockIdx.y;
  const float xs = p.x_scale[r];
  T* row = static_cast<T*>(p.out) + r * p.cols;
  for (int64_t c = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * 8; c < p.cols;
       c += int64_t{gridDim.x} * blockDim.x * 8) {
    float o[8], w[8], b[8] = {};
    Act<T>::load8(row + c, o);
    Act<float>::load8(p.w_scale + c, w);
    if (p.bias) {
      if (p.bias_f32) {
        Act<float>::load8(static_cast<const float*>(p.bias) + c, b);
      } else {
        Act<uint16_t>::load8(static_cast<const uint16_t*>(p.bias) + c, b);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = o[j] * (xs * w[j]) + b[j];
    Act<T>::store8(row + c, o);
  }
}

// Eight codes a thread (cols is a multiple of 8: the FP8 GEMMs take K in multiples of 16).
template <typename T>
__global__ void widen_fp8_rows_kernel(const Fp8WidenParams p) {
  const int64_t n8 = p.rows * p.cols / 8;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n8; i += int64_t{gridDim.x} * blockDim.x) {
    const float s = p.scale[i * 8 / p.cols];
    const uint2 codes = reinterpret_cast<const uint2*>(p.q)[i];
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      f[j] = e4m3_to_f32(static_cast<uint8_t>((j < 4 ? codes.x : codes.y) >> (8 * (j & 3)))) * s;
    Act<T>::store8(static_cast<T*>(p.out) + i * 8, f);
  }
}

}  // namespace

void launch_widen_fp8_rows(const Fp8WidenParams& p, cudaStream_t stream) {
  const int64_t n8 = p.rows * p.cols / 8;
  if (n8 == 0) return;
  const int64_t blocks = std::min<int64_t>((n8 + 255) / 256, 65535 * 8);
  if (p.dtype == DType::kF32) {
    widen_fp8_rows_kernel<float><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  } else {
    widen_fp8_rows_kernel<uint16_t><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("widen_fp8_rows_kernel");
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
  if (p.cols % 8 == 0 && p.rows <= 65535 && aligned16(p.out) && aligned16(p.w_scale) &&
      (!p.bias || aligned16(p.bias))) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((p.cols / 8 + 255) / 256, 65535)),
                    static_cast<unsigned>(p.rows));
    if (p.out_f32) {
      fp8_scale_vec_kernel<float><<<grid, 256, 0, stream>>>(p);
    } else {
      fp8_scale_vec_kernel<uint16_t><<<grid, 256, 0, stream>>>(p);
    }
    SERVE8_CUDA_CHECK_LAUNCH("fp8_scale_vec_kernel");
    return;
  }
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65535 * 8);
  fp8_scale_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("fp8_scale_kernel");
}

}  // namespace serve8
