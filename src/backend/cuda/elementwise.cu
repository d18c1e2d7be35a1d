// The small kernels: row gathers, RMSNorm (with the fused residual add), RoPE, SiLU·mul and the
// bias fallback. All memory bound; 16-byte accesses where rows allow them. Templates over the
// activation type T (uint16_t bf16 bits or float, see Act in cuda_utils.cuh); math is fp32.
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kRowThreads = 256;
// A decode step's SiLU row is one block: wide, so that it is two loads deep, not seven.
constexpr int kSiluRowThreads = 1024;
// RoPE: a block per (token, 8 heads), so that one decode token spreads over many SMs instead of
// serializing its heads in one block; 4 rotations in flight per thread.
constexpr int kRopeThreads = 128;
constexpr int kRopeHeadsPerBlock = 8;
constexpr int kRopePerThread = 4;

__global__ void gather_rows_kernel(const GatherRowsParams p) {
  const int row = blockIdx.x;
  const int64_t src_row = p.rows[row] - p.first_row;
  char* dst = static_cast<char*>(p.dst) + row * p.row_bytes;
  const bool valid = src_row >= 0 && src_row < p.num_src_rows;
  const char* src = static_cast<const char*>(p.src) + (valid ? src_row : 0) * p.row_bytes;
  if (p.row_bytes % 16 == 0 && aligned16(src) && aligned16(dst)) {
    const int64_t n = p.row_bytes / 16;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = valid ? reinterpret_cast<const uint4*>(src)[i] : uint4{0, 0, 0, 0};
  } else {
    for (int64_t i = threadIdx.x; i < p.row_bytes; i += blockDim.x) dst[i] = valid ? src[i] : char{0};
  }
}

__device__ __forceinline__ float load_weight(const RmsNormParams& p, int i) {
  return p.weight_f32 ? static_cast<const float*>(p.weight)[i]
                      : bf16_bits_to_float(static_cast<const uint16_t*>(p.weight)[i]);
}

// The FP8 rows of a row this thread block just wrote (Backend::Fp8Rows), amax its max |value|:
// each thread reads back only what it stored itself, so no barrier is needed before.
template <typename T>
__device__ __forceinline__ void store_fp8_row(const T* row, uint8_t* q, float* scale, int cols, float amax) {
  const float inv = fp8_row_inv(amax);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) q[i] = f32_to_e4m3(Act<T>::load(row + i) * inv);
  if (threadIdx.x == 0) *scale = fp8_row_scale(amax);
}

// One block per row, one element per access: rows of any width and alignment (rmsnorm_regs_kernel
// takes the aligned rows of up to 8,192). The first pass forms (and for add_rmsnorm stores) the
// row and its sum of squares; the second reads it back from where this same thread put it, so no
// barrier is needed.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) rmsnorm_kernel(const RmsNormParams p) {
  wait_then_allow_dependents();
  using A = Act<T>;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + row * p.hidden;
  T* res = p.residual ? static_cast<T*>(p.residual) + row * p.hidden : nullptr;
  T* out = static_cast<T*>(p.out) + row * p.hidden;
  const T* src = res ? res : x;  // where the normalized row lives after pass one
  float ss = 0.0f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float v = A::load(x + i);
    if (res) {
      // The residual stream is stored in the activation dtype (bf16: rounded): normalize the sum
      // as stored, as the next layer will see it.
      v = A::round(v + A::load(res + i));
      A::store(res + i, v);
    }
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv_rms = rsqrtf(ss / static_cast<float>(p.hidden) + p.eps);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    const float v = A::round(A::load(src + i) * inv_rms * load_weight(p, i));
    A::store(out + i, v);
    amax = fmaxf(amax, fabsf(v));
  }
  if (p.q) store_fp8_row(out, p.q + row * p.hidden, p.q_scale + row, p.hidden, block_max(amax, scratch));
}

// Eight weights from a 16-byte aligned address.
__device__ __forceinline__ void load_weight8(const RmsNormParams& p, int i, float (&w)[8]) {
  if (p.weight_f32) {
    Act<float>::load8(static_cast<const float*>(p.weight) + i, w);
  } else {
    Act<uint16_t>::load8(static_cast<const uint16_t*>(p.weight) + i, w);
  }
}

// RMSNorm of 16-byte aligned rows of at most kRowThreads * 8 * kIters elements, 8 a thread an
// access: the row and its weights stay in registers, all loaded before any store, so a row costs
// one round trip to memory.
template <typename T, int kIters>
__global__ void __launch_bounds__(kRowThreads) rmsnorm_regs_kernel(const RmsNormParams p) {
  using A = Act<T>;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + row * p.hidden;
  T* res = p.residual ? static_cast<T*>(p.residual) + row * p.hidden : nullptr;
  T* out = static_cast<T*>(p.out) + row * p.hidden;
  float v[kIters][8], a[kIters][8], w[kIters][8];
  // The weights are the model's: loaded while the kernel ahead still runs.
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * kRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (i < p.hidden) load_weight8(p, i, w[it]);
  }
  wait_then_allow_dependents();
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * kRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (i >= p.hidden) continue;
    A::load8(x + i, v[it]);
    if (res) A::load8(res + i, a[it]);
  }
  float ss = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * kRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (i >= p.hidden) continue;
    if (res) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[it][j] = A::round(v[it][j] + a[it][j]);
      A::store8(res + i, v[it]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[it][j] * v[it][j];
  }
  ss = block_sum(ss, scratch);
  const float inv_rms = rsqrtf(ss / static_cast<float>(p.hidden) + p.eps);
  float amax = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * kRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (i >= p.hidden) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[it][j] = A::round(v[it][j] * inv_rms * w[it][j]);
      amax = fmaxf(amax, fabsf(v[it][j]));
    }
    A::store8(out + i, v[it]);
  }
  if (!p.q) return;
  amax = block_max(amax, scratch);
  const float inv = fp8_row_inv(amax);
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * kRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (i < p.hidden) store_e4m3x8(p.q + row * p.hidden + i, v[it], inv);
  }
  if (threadIdx.x == 0) p.q_scale[row] = fp8_row_scale(amax);
}

// One block per (token, 8 heads): the block computes the token's angles into shared memory, in
// fp32 as float(pos) * inv_freq (each block the same values), then rotates its heads of q and k.
template <typename T>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeParams p) {
  allow_dependent_launch();
  using A = Act<T>;
  extern __shared__ float cs[];  // cos [D/2], then sin [D/2]
  const int t = blockIdx.x;
  const int half = p.head_dim / 2;
  rope_angles(p.positions, p.inv_freq, t, half, cs);
  __syncthreads();
  const int heads = p.num_q_heads + p.num_kv_heads;
  const int h0 = blockIdx.y * kRopeHeadsPerBlock;
  const int n = min(kRopeHeadsPerBlock, heads - h0) * half;
  // All loads of a thread's rotations first, then the stores: q and k could alias as far as the
  // compiler knows, and interleaving would serialize one memory round trip per rotation.
  for (int j0 = threadIdx.x; j0 < n; j0 += kRopeThreads * kRopePerThread) {
    T* dst[kRopePerThread];
    int col[kRopePerThread];
    float x1[kRopePerThread], x2[kRopePerThread];
#pragma unroll
    for (int r = 0; r < kRopePerThread; ++r) {
      const int j = j0 + r * kRopeThreads;
      dst[r] = nullptr;
      if (j >= n) continue;
      const int h = h0 + j / half;
      col[r] = j % half;
      const T* src;
      if (h < p.num_q_heads) {
        src = static_cast<const T*>(p.q) + t * p.q_stride + int64_t{h} * p.head_dim;
        dst[r] = static_cast<T*>(p.q_out) + (static_cast<int64_t>(t) * p.num_q_heads + h) * p.head_dim;
      } else {
        dst[r] = static_cast<T*>(p.k) + t * p.k_stride + int64_t{h - p.num_q_heads} * p.head_dim;
        src = dst[r];
      }
      x1[r] = A::load(src + col[r]);
      x2[r] = A::load(src + col[r] + half);
    }
#pragma unroll
    for (int r = 0; r < kRopePerThread; ++r) {
      if (!dst[r]) continue;
      rotate_half_pair<A>(x1[r], x2[r], cs[col[r]], cs[half + col[r]]);
      A::store(dst[r] + col[r], x1[r]);
      A::store(dst[r] + col[r] + half, x2[r]);
    }
  }
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

template <typename T, int kVec>
__global__ void silu_mul_kernel(const SiluMulParams p) {
  wait_then_allow_dependents();
  using A = Act<T>;
  const int64_t per_row = p.inter / kVec;
  const int64_t n = per_row * p.rows;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n; idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row;
    const int64_t c = (idx - r * per_row) * kVec;
    const T* g = static_cast<const T*>(p.gate_up) + r * 2 * p.inter + c;
    T* o = static_cast<T*>(p.out) + r * p.inter + c;
    if constexpr (kVec == 8) {
      float a[8], b[8];
      A::load8(g, a);
      A::load8(g + p.inter, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] = silu(a[j]) * b[j];
      A::store8(o, a);
    } else {
      A::store(o, silu(A::load(g)) * A::load(g + p.inter));
    }
  }
}

// silu_mul with the FP8 rows of its output: a block per row, which the row's max needs; one
// element per access, for rows silu_mul_fp8_regs_kernel does not take.
template <typename T>
__global__ void __launch_bounds__(kSiluRowThreads) silu_mul_fp8_kernel(const SiluMulParams p) {
  wait_then_allow_dependents();
  using A = Act<T>;
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* g = static_cast<const T*>(p.gate_up) + r * 2 * p.inter;
  T* o = static_cast<T*>(p.out) + r * p.inter;
  float amax = 0.0f;
  for (int c = threadIdx.x; c < p.inter; c += blockDim.x) {
    const float a = A::round(silu(A::load(g + c)) * A::load(g + p.inter + c));
    A::store(o + c, a);
    amax = fmaxf(amax, fabsf(a));
  }
  store_fp8_row(o, p.q + r * p.inter, p.q_scale + r, p.inter, block_max(amax, scratch));
}

// silu_mul with FP8 rows for 16-byte aligned rows of at most kSiluRowThreads * 8 * kIters, 8 a
// thread an access: the row stays in registers for its FP8 codes instead of being read back.
template <typename T, int kIters>
__global__ void __launch_bounds__(kSiluRowThreads) silu_mul_fp8_regs_kernel(const SiluMulParams p) {
  wait_then_allow_dependents();
  using A = Act<T>;
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* g = static_cast<const T*>(p.gate_up) + r * 2 * p.inter;
  T* o = static_cast<T*>(p.out) + r * p.inter;
  // Only the products stay live (at 1,024 threads a thread has 64 registers): each vector's
  // product is formed as its loads arrive, and the stores wait until every load was issued.
  float a[kIters][8];
  float amax = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int c = (it * kSiluRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (c >= p.inter) continue;
    float b[8];
    A::load8(g + c, a[it]);
    A::load8(g + p.inter + c, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a[it][j] = A::round(silu(a[it][j]) * b[j]);
      amax = fmaxf(amax, fabsf(a[it][j]));
    }
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int c = (it * kSiluRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (c < p.inter) A::store8(o + c, a[it]);
  }
  amax = block_max(amax, scratch);
  const float inv = fp8_row_inv(amax);
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int c = (it * kSiluRowThreads + static_cast<int>(threadIdx.x)) * 8;
    if (c < p.inter) store_e4m3x8(p.q + r * p.inter + c, a[it], inv);
  }
  if (threadIdx.x == 0) p.q_scale[r] = fp8_row_scale(amax);
}

__global__ void bias_add_kernel(const BiasAddParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % p.cols;
    const float b =
        p.bias_f32 ? static_cast<const float*>(p.bias)[c] : bf16_bits_to_float(static_cast<const uint16_t*>(p.bias)[c]);
    if (p.out_f32) {
      static_cast<float*>(p.out)[i] += b;
    } else {
      uint16_t* o = static_cast<uint16_t*>(p.out) + i;
      *o = float_to_bf16_bits(bf16_bits_to_float(*o) + b);
    }
  }
}

int grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

// The register kernels hold at most this many 8-wide vectors of a row per thread.
constexpr int kMaxRegIters = 4;

// f(std::integral_constant<int, iters>{}) for iters in 1..kMaxRegIters: a register kernel's instance.
template <typename F>
void with_iters(int iters, F&& f) {
  switch (iters) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, kMaxRegIters>{});
  }
}

// The small ops launch early under the kernel ahead (launch_dependent), except those that quantize
// for FP8 weights: early, they made Llama-3-8B's B=1 step 1.9% slower on an H100 (bench/README).
template <typename T>
void launch_rmsnorm_typed(const RmsNormParams& p, cudaStream_t stream) {
  const bool vec = p.hidden % 8 == 0 && aligned16(p.x) && aligned16(p.out) && (!p.residual || aligned16(p.residual)) &&
                   (!p.q || aligned16(p.q));
  const int iters = (p.hidden + kRowThreads * 8 - 1) / (kRowThreads * 8);
  if (vec && aligned16(p.weight) && iters <= kMaxRegIters) {
    with_iters(iters, [&](auto n) {
      launch_dependent_if(!p.q, rmsnorm_regs_kernel<T, n()>, p.rows, kRowThreads, 0, stream, p);
    });
  } else {
    launch_dependent_if(!p.q, rmsnorm_kernel<T>, p.rows, kRowThreads, 0, stream, p);
  }
}

template <typename T>
void launch_silu_mul_typed(const SiluMulParams& p, cudaStream_t stream) {
  const bool vec = p.inter % 8 == 0 && aligned16(p.gate_up) && aligned16(p.out) && (!p.q || aligned16(p.q));
  if (p.q) {
    const int iters = (p.inter + kSiluRowThreads * 8 - 1) / (kSiluRowThreads * 8);
    if (vec && iters <= kMaxRegIters) {
      with_iters(iters, [&](auto n) { silu_mul_fp8_regs_kernel<T, n()><<<p.rows, kSiluRowThreads, 0, stream>>>(p); });
    } else {
      silu_mul_fp8_kernel<T><<<p.rows, kSiluRowThreads, 0, stream>>>(p);
    }
    return;
  }
  const int threads = 256;
  if (vec) {
    launch_dependent(silu_mul_kernel<T, 8>, grid_for(int64_t{p.rows} * p.inter / 8, threads), threads, 0, stream, p);
  } else {
    launch_dependent(silu_mul_kernel<T, 1>, grid_for(int64_t{p.rows} * p.inter, threads), threads, 0, stream, p);
  }
}

}  // namespace

void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  gather_rows_kernel<<<p.num_rows, 128, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

void launch_rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.dtype == DType::kF32) {
    launch_rmsnorm_typed<float>(p, stream);
  } else {
    launch_rmsnorm_typed<uint16_t>(p, stream);
  }
  SERVE8_CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

void launch_rope(const RopeParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const size_t smem = sizeof(float) * static_cast<size_t>(p.head_dim);
  const dim3 grid(p.num_tokens, (p.num_q_heads + p.num_kv_heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock);
  if (p.dtype == DType::kF32) {
    rope_kernel<float><<<grid, kRopeThreads, smem, stream>>>(p);
  } else {
    rope_kernel<uint16_t><<<grid, kRopeThreads, smem, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("rope_kernel");
}

void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.dtype == DType::kF32) {
    launch_silu_mul_typed<float>(p, stream);
  } else {
    launch_silu_mul_typed<uint16_t>(p, stream);
  }
  SERVE8_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

void launch_bias_add(const BiasAddParams& p, cudaStream_t stream) {
  if (p.rows * p.cols == 0) return;
  bias_add_kernel<<<grid_for(p.rows * p.cols, 256), 256, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("bias_add_kernel");
}

}  // namespace serve8
