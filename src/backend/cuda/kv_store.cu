// kv_store: scale, convert and scatter new K/V rows into the pool in one pass. The conversions are
// core/dtype.h's own functions compiled for the device, so the stored bytes equal the CPU
// backend's bit for bit (saturation and NaN handling included). The new rows are bf16 or fp32
// activations (Act in cuda_utils.cuh); an fp32 pool takes fp32 rows only.
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kFusedThreads = 128;

template <DType kStore>
struct StoreTraits;
template <>
struct StoreTraits<DType::kF32> {
  using T = float;
  __device__ static T convert(float x) { return x; }
};
template <>
struct StoreTraits<DType::kBF16> {
  using T = uint16_t;
  __device__ static T convert(float x) { return f32_to_bf16(x); }
};
template <>
struct StoreTraits<DType::kF16> {
  using T = uint16_t;
  __device__ static T convert(float x) { return f32_to_f16(x); }
};
// FP8 stores eight values at a time (store_fp8x8: the same bytes as the lone conversion).
template <DType kFp8>
struct Fp8StoreTraits {
  using T = uint8_t;
  static constexpr DType kDType = kFp8;
  __device__ static T convert(float x) { return kFp8 == DType::kFP8E4M3 ? f32_to_e4m3(x) : f32_to_e5m2(x); }
};
template <>
struct StoreTraits<DType::kFP8E5M2> : Fp8StoreTraits<DType::kFP8E5M2> {};
template <>
struct StoreTraits<DType::kFP8E4M3> : Fp8StoreTraits<DType::kFP8E4M3> {};

// x / scale, as the pool stores it. A true division, as the CPU's. NaN passes through unchanged:
// x86 returns the NaN operand (sign and payload kept), the GPU's division would not.
__device__ __forceinline__ float scaled(float x, float scale) { return isnan(x) ? x : __fdiv_rn(x, scale); }

// x / scale converted to the pool's dtype.
template <typename Traits>
__device__ __forceinline__ typename Traits::T to_pool(float x, float scale) {
  return Traits::convert(scaled(x, scale));
}

// Eight values of a pool row, converted, in one store. x / 1 is x: a pool without calibrated
// scales skips the IEEE divisions (a dozen instructions each).
template <typename Traits>
__device__ __forceinline__ void store8(typename Traits::T* dst, const float (&x)[8], float scale) {
  using T = typename Traits::T;
  float v[8];
  if (scale == 1.0f) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = x[j];
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = scaled(x[j], scale);
  }
  if constexpr (sizeof(T) == 1) {
    store_fp8x8<Traits::kDType>(dst, v);
  } else {
    alignas(16) T y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = Traits::convert(v[j]);
    if constexpr (sizeof(T) == 4) {
      reinterpret_cast<uint4*>(dst)[0] = reinterpret_cast<const uint4*>(y)[0];
      reinterpret_cast<uint4*>(dst)[1] = reinterpret_cast<const uint4*>(y)[1];
    } else {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(y);
    }
  }
}

// One thread per kVec consecutive elements of one (token, head) row; K and V alike.
template <typename TIn, DType kStore, int kVec>
__global__ void kv_store_kernel(const KvStoreParams p) {
  wait_then_allow_dependents();
  using Traits = StoreTraits<kStore>;
  using A = Act<TIn>;
  using T = typename Traits::T;
  const int chunks = p.head_dim / kVec;
  const int64_t per_tensor = int64_t{p.num_tokens} * p.num_kv_heads * chunks;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < 2 * per_tensor;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const bool is_v = idx >= per_tensor;
    const int64_t i = is_v ? idx - per_tensor : idx;
    const int64_t row = i / chunks;  // token * Hkv + head
    const int c = static_cast<int>(i - row * chunks) * kVec;
    const int token = static_cast<int>(row / p.num_kv_heads);
    const int head = static_cast<int>(row - int64_t{token} * p.num_kv_heads);
    const TIn* src = static_cast<const TIn*>(is_v ? p.v : p.k) + token * (is_v ? p.v_stride : p.k_stride) +
                     int64_t{head} * p.head_dim + c;
    const float scale = (is_v ? p.v_scale : p.k_scale)[head];
    const int64_t slot = p.out_slots[token];
    T* dst = static_cast<T*>(is_v ? p.v_pool : p.k_pool) + kv_row(slot, head, p.num_kv_heads) * p.head_dim + c;
    if constexpr (kVec == 8) {
      float x[8];
      A::load8(src, x);
      store8<Traits>(dst, x, scale);
    } else {
      dst[0] = to_pool<Traits>(A::load(src), scale);
    }
  }
}

// RoPE and kv_store in one kernel: a block per (token, group of heads) over q's, k's and v's
// heads, D/16 threads a head. A q or k thread rotates 8 pairs (i, i + D/2) as rope_kernel does (q
// into q_out, k in place); a k or v thread stores its 16 values into the pool.
template <typename TIn, DType kStore>
__global__ void __launch_bounds__(kFusedThreads) rope_kv_store_kernel(const RopeParams r, const KvStoreParams s) {
  using Traits = StoreTraits<kStore>;
  using A = Act<TIn>;
  using T = typename Traits::T;
  extern __shared__ float cs[];  // cos [D/2], then sin [D/2]
  const int t = blockIdx.x;
  const int d = r.head_dim, half = d / 2;
  const int per_head = d / 16;
  const int head = blockIdx.y * (kFusedThreads / per_head) + threadIdx.x / per_head;
  const int c = threadIdx.x % per_head * 8;
  const int hq = r.num_q_heads, hkv = r.num_kv_heads;
  // k's and v's pool slot and scale, read before the angles so that their latency hides under them;
  // both, and the angles, come from the step's inputs, so they are ready before the kernel ahead ends.
  const bool is_v = head >= hq + hkv, is_k = head >= hq && !is_v;
  const int h = is_v ? head - hq - hkv : is_k ? head - hq : head;
  const bool stores = head < hq + 2 * hkv && head >= hq;
  const int64_t slot = stores ? s.out_slots[t] : 0;
  const float scale = stores ? (is_v ? s.v_scale : s.k_scale)[h] : 1.0f;
  rope_angles(r.positions, r.inv_freq, t, half, cs);
  __syncthreads();
  wait_then_allow_dependents();
  if (head >= hq + 2 * hkv) return;
  if (is_v) {  // v: 16 values as they are
    const TIn* src = static_cast<const TIn*>(s.v) + t * s.v_stride + int64_t{h} * d + 2 * c;
    T* dst = static_cast<T*>(s.v_pool) + kv_row(slot, h, hkv) * d + 2 * c;
    float x[8];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      A::load8(src + 8 * i, x);
      store8<Traits>(dst + 8 * i, x, scale);
    }
    return;
  }
  TIn* row = is_k ? static_cast<TIn*>(r.k) + t * r.k_stride + int64_t{h} * d
                  : static_cast<TIn*>(r.q_out) + (int64_t{t} * hq + h) * d;
  const TIn* src = is_k ? row : static_cast<const TIn*>(r.q) + t * r.q_stride + int64_t{h} * d;
  float x1[8], x2[8];
  A::load8(src + c, x1);
  A::load8(src + c + half, x2);
#pragma unroll
  for (int j = 0; j < 8; ++j) rotate_half_pair<A>(x1[j], x2[j], cs[c + j], cs[half + c + j]);
  A::store8(row + c, x1);
  A::store8(row + c + half, x2);
  if (!is_k) return;
  T* dst = static_cast<T*>(s.k_pool) + kv_row(slot, h, hkv) * d;
  store8<Traits>(dst + c, x1, scale);
  store8<Traits>(dst + c + half, x2, scale);
}

template <typename TIn, DType kStore>
void launch_typed(const KvStoreParams& p, cudaStream_t stream) {
  const int threads = 256;
  const bool vec =
      p.head_dim % 8 == 0 && aligned16(p.k) && aligned16(p.v) && p.k_stride % 8 == 0 && p.v_stride % 8 == 0;
  const int64_t work = 2 * int64_t{p.num_tokens} * p.num_kv_heads * (vec ? p.head_dim / 8 : p.head_dim);
  const int64_t blocks64 = (work + threads - 1) / threads;
  const int blocks = static_cast<int>(blocks64 < 65535 ? blocks64 : 65535);
  if (vec) {
    launch_dependent(kv_store_kernel<TIn, kStore, 8>, blocks, threads, 0, stream, p);
  } else {
    launch_dependent(kv_store_kernel<TIn, kStore, 1>, blocks, threads, 0, stream, p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("kv_store_kernel");
}

template <typename TIn, DType kStore>
void launch_fused_typed(const RopeParams& r, const KvStoreParams& s, cudaStream_t stream) {
  const int heads_per_block = kFusedThreads / (r.head_dim / 16);
  const dim3 grid(r.num_tokens, (r.num_q_heads + 2 * r.num_kv_heads + heads_per_block - 1) / heads_per_block);
  const size_t smem = sizeof(float) * static_cast<size_t>(r.head_dim);
  launch_dependent(rope_kv_store_kernel<TIn, kStore>, grid, kFusedThreads, smem, stream, r, s);
  SERVE8_CUDA_CHECK_LAUNCH("rope_kv_store_kernel");
}

// Calls f.template operator()<TIn, kStore>() for p's activation type (bf16 bits or float) and
// pool dtype. int8/int4 pools, and bf16 rows into an fp32 pool (which holds fp32 compute's K/V
// only), are rejected by the backend's entry point.
template <typename F>
void with_store_types(const KvStoreParams& p, F&& f) {
  const auto for_input = [&]<typename TIn>() {
    switch (p.kv_dtype) {
      case DType::kBF16:
        return f.template operator()<TIn, DType::kBF16>();
      case DType::kF16:
        return f.template operator()<TIn, DType::kF16>();
      case DType::kFP8E5M2:
        return f.template operator()<TIn, DType::kFP8E5M2>();
      case DType::kFP8E4M3:
        return f.template operator()<TIn, DType::kFP8E4M3>();
      case DType::kF32:
        if constexpr (std::is_same_v<TIn, float>) f.template operator()<float, DType::kF32>();
        return;
      case DType::kI32:
      case DType::kI8:
      case DType::kI4:
        return;
    }
  };
  if (p.dtype == DType::kF32) {
    for_input.template operator()<float>();
  } else {
    for_input.template operator()<uint16_t>();
  }
}

}  // namespace

bool rope_kv_store_fusable(const RopeParams& r, const KvStoreParams& s) {
  // Rows of 8 elements or more (bf16 or fp32) start 16-byte aligned where the strides are multiples of 8.
  return r.head_dim % 16 == 0 && r.head_dim / 16 <= kFusedThreads && aligned16(r.q) && aligned16(r.q_out) &&
         aligned16(r.k) && aligned16(s.v) && r.q_stride % 8 == 0 && r.k_stride % 8 == 0 && s.v_stride % 8 == 0;
}

void launch_rope_kv_store(const RopeParams& r, const KvStoreParams& s, cudaStream_t stream) {
  if (r.num_tokens == 0) return;
  with_store_types(s, [&]<typename TIn, DType kStore>() { launch_fused_typed<TIn, kStore>(r, s, stream); });
}

void launch_kv_store(const KvStoreParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  with_store_types(p, [&]<typename TIn, DType kStore>() { launch_typed<TIn, kStore>(p, stream); });
}

}  // namespace serve8
