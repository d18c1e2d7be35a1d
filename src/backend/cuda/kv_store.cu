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
template <>
struct StoreTraits<DType::kFP8E5M2> {
  using T = uint8_t;
  __device__ static T convert(float x) { return f32_to_e5m2(x); }
};
template <>
struct StoreTraits<DType::kFP8E4M3> {
  using T = uint8_t;
  __device__ static T convert(float x) { return f32_to_e4m3(x); }
};

// One thread per kVec consecutive elements of one (token, head) row; K and V alike.
template <typename TIn, DType kStore, int kVec>
__global__ void kv_store_kernel(const KvStoreParams p) {
  allow_dependent_launch();
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
    const TIn* src = static_cast<const TIn*>(is_v ? p.v : p.k) + row * p.head_dim + c;
    const float scale = (is_v ? p.v_scale : p.k_scale)[head];
    const int64_t slot = p.out_slots[token];
    T* dst = static_cast<T*>(is_v ? p.v_pool : p.k_pool) + kv_row(slot, head, p.num_kv_heads) * p.head_dim + c;
    float x[kVec];
    if constexpr (kVec == 8) {
      A::load8(src, x);
    } else {
      x[0] = A::load(src);
    }
    alignas(16) T y[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      // A true division, as the CPU's. NaN passes through unchanged: x86 returns the NaN operand
      // (sign and payload kept), while the GPU's division would return its canonical NaN.
      y[j] = Traits::convert(isnan(x[j]) ? x[j] : __fdiv_rn(x[j], scale));
    }
    if constexpr (kVec == 8 && sizeof(T) == 4) {
      reinterpret_cast<uint4*>(dst)[0] = reinterpret_cast<const uint4*>(y)[0];
      reinterpret_cast<uint4*>(dst)[1] = reinterpret_cast<const uint4*>(y)[1];
    } else if constexpr (kVec == 8 && sizeof(T) == 2) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(y);
    } else if constexpr (kVec == 8 && sizeof(T) == 1) {
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(y);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) dst[j] = y[j];
    }
  }
}

template <typename TIn, DType kStore>
void launch_typed(const KvStoreParams& p, cudaStream_t stream) {
  const int threads = 256;
  const bool vec = p.head_dim % 8 == 0 && (reinterpret_cast<uintptr_t>(p.k) & 15u) == 0 &&
                   (reinterpret_cast<uintptr_t>(p.v) & 15u) == 0;
  const int64_t work = 2 * int64_t{p.num_tokens} * p.num_kv_heads * (vec ? p.head_dim / 8 : p.head_dim);
  const int64_t blocks64 = (work + threads - 1) / threads;
  const int blocks = static_cast<int>(blocks64 < 65535 ? blocks64 : 65535);
  if (vec) {
    kv_store_kernel<TIn, kStore, 8><<<blocks, threads, 0, stream>>>(p);
  } else {
    kv_store_kernel<TIn, kStore, 1><<<blocks, threads, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("kv_store_kernel");
}

template <typename TIn>
void launch_for_input(const KvStoreParams& p, cudaStream_t stream) {
  switch (p.kv_dtype) {
    case DType::kBF16:
      return launch_typed<TIn, DType::kBF16>(p, stream);
    case DType::kF16:
      return launch_typed<TIn, DType::kF16>(p, stream);
    case DType::kFP8E5M2:
      return launch_typed<TIn, DType::kFP8E5M2>(p, stream);
    case DType::kFP8E4M3:
      return launch_typed<TIn, DType::kFP8E4M3>(p, stream);
    case DType::kF32:
      // An fp32 pool holds fp32 compute's K/V only; bf16 rows into it are rejected by the backend.
      if constexpr (std::is_same_v<TIn, float>) launch_typed<float, DType::kF32>(p, stream);
      return;
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      return;  // rejected by the backend's entry point
  }
}

}  // namespace

void launch_kv_store(const KvStoreParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (p.dtype == DType::kF32) {
    launch_for_input<float>(p, stream);
  } else {
    launch_for_input<uint16_t>(p, stream);
  }
}

}  // namespace serve8
