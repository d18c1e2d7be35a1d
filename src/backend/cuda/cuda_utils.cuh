// Device helpers shared by the CUDA backend's kernels: bf16 vectors, the activation types, warp and
// block reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/kv_layout.h"
#include "core/dtype.h"

namespace serve8 {

// Lets a kernel launched after this one under a programmatic dependent launch (the skinny FP8
// GEMM, decode attention) start now: it reads its weights while this kernel runs and waits
// (griddepcontrol.wait) for its results. No effect on kernels launched plainly.
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }

// Where a small op first needs the results of the kernel ahead: under a programmatic dependent
// launch (launch_dependent) it waits for them, then lets the next kernel launch (after the wait, so
// no chain of waiting kernels fills the SMs); in a plain launch only the latter.
__device__ __forceinline__ void wait_then_allow_dependents() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  allow_dependent_launch();
}

// Launches kernel under a programmatic dependent launch where `programmatic` (else plainly): it may
// start while the kernel before it runs, so it must wait (griddepcontrol.wait) before reading
// anything that kernel writes.
template <typename... Params, typename... Args>
void launch_dependent_if(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &dependent;
  config.numAttrs = programmatic ? 1 : 0;
  SERVE8_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  launch_dependent_if(true, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// Lets kernel take smem_bytes of dynamic shared memory and returns how many of its blocks of
// `threads` an SM holds at once (before any graph capture: it sets a function attribute).
template <typename... Params>
int resident_blocks(void (*kernel)(Params...), int threads, int smem_bytes) {
  SERVE8_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  int blocks = 0;
  SERVE8_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
  return blocks;
}

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float(uint32_t{h} << 16); }
// Round to nearest even, like core/dtype.h's f32_to_bf16.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) { return f32_to_bf16(f); }

// Eight bf16 values in one 16-byte word.
__device__ __forceinline__ void unpack_bf16x8(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
  return uint32_t{float_to_bf16_bits(a)} | (uint32_t{float_to_bf16_bits(b)} << 16);
}

__device__ __forceinline__ uint4 pack_bf16x8(const float (&f)[8]) {
  return uint4{pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7])};
}

// Activations as the kernels see them: bf16 carried as raw uint16_t bits (the default compute
// dtype) or fp32 (--dtype float32). The small kernels are templates over the element type and go
// through Act<T>, so the bf16 instantiation is the code it was before fp32 existed.
template <typename T>
struct Act;

template <>
struct Act<uint16_t> {
  __device__ __forceinline__ static float load(const uint16_t* p) { return bf16_bits_to_float(*p); }
  __device__ __forceinline__ static void store(uint16_t* p, float v) { *p = float_to_bf16_bits(v); }
  // v as it reads back after a store.
  __device__ __forceinline__ static float round(float v) { return bf16_bits_to_float(float_to_bf16_bits(v)); }
  // Eight consecutive elements at a 16-byte aligned address.
  __device__ __forceinline__ static void load8(const uint16_t* p, float (&f)[8]) {
    unpack_bf16x8(*reinterpret_cast<const uint4*>(p), f);
  }
  __device__ __forceinline__ static void store8(uint16_t* p, const float (&f)[8]) {
    *reinterpret_cast<uint4*>(p) = pack_bf16x8(f);
  }
};

template <>
struct Act<float> {
  __device__ __forceinline__ static float load(const float* p) { return *p; }
  __device__ __forceinline__ static void store(float* p, float v) { *p = v; }
  __device__ __forceinline__ static float round(float v) { return v; }
  __device__ __forceinline__ static void load8(const float* p, float (&f)[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
  __device__ __forceinline__ static void store8(float* p, const float (&f)[8]) {
    reinterpret_cast<float4*>(p)[0] = float4{f[0], f[1], f[2], f[3]};
    reinterpret_cast<float4*>(p)[1] = float4{f[4], f[5], f[6], f[7]};
  }
};

// RoPE's angles for position positions[t]: cs[i] = cos, cs[half + i] = sin of float(pos) *
// inv_freq[i], by the block's threads (a barrier must follow).
__device__ __forceinline__ void rope_angles(const int32_t* positions, const float* inv_freq, int t, int half,
                                            float* cs) {
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(pos * inv_freq[i], &cs[half + i], &cs[i]);
}

// One rotate-half pair (x1, x2) by angle (cos c, sin s), each rounded as the activation stores it.
template <typename A>
__device__ __forceinline__ void rotate_half_pair(float& x1, float& x2, float c, float s) {
  const float y1 = x1 * c - x2 * s;
  const float y2 = x2 * c + x1 * s;
  x1 = A::round(y1);
  x2 = A::round(y2);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The Walsh-Hadamard transform of the int8/int4 pools' rows (kv_rotated.cu, the decode kernel): x holds
// elements lane * kE .. + kE - 1 of a row of 32 * kE; in place, the orthonormal transform
// (norm = 1 / sqrt(32 kE)). Each stage pairs j with j + len: a + b at j, a - b at j + len.
template <int kE>
__device__ __forceinline__ void warp_hadamard(float (&x)[kE], float norm) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int len = 1; len < kE; len <<= 1) {
#pragma unroll
    for (int j = 0; j < kE; ++j) {
      if ((j & len) == 0) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = lane & m;
#pragma unroll
    for (int j = 0; j < kE; ++j) {
      const float other = __shfl_xor_sync(0xffffffffu, x[j], m);
      x[j] = upper ? other - x[j] : x[j] + other;
    }
  }
#pragma unroll
  for (int j = 0; j < kE; ++j) x[j] *= norm;
}

// One whole warp: out = H x (+ mean) of a row of 32 * kE values (bf16 bits, or floats in shared
// memory), rounded to bf16; the int8/int4 pools' q and attention outputs cross the rotation here.
template <int kE, typename In>
__device__ __forceinline__ void hadamard_row(const In* x, const float* mean, float norm, uint16_t* out) {
  const int lane = threadIdx.x % 32;
  float v[kE];
#pragma unroll
  for (int j = 0; j < kE; ++j) {
    if constexpr (std::is_same_v<In, float>) {
      v[j] = x[lane * kE + j];
    } else {
      v[j] = bf16_bits_to_float(x[lane * kE + j]);
    }
  }
  warp_hadamard<kE>(v, norm);
  if (mean) {
#pragma unroll
    for (int j = 0; j < kE; ++j) v[j] += mean[lane * kE + j];
  }
#pragma unroll
  for (int j = 0; j < kE; ++j) out[lane * kE + j] = float_to_bf16_bits(v[j]);
}

// Sum over the block; every thread gets the result. `scratch` holds 32 floats; blockDim.x is a
// multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x >> 5;
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// e4m3 / e5m2 codes of two floats (lo in bits 0-7, hi in 8-15) by one hardware conversion: round
// to nearest even, saturating, the bytes of core/dtype.h's f32_to_e4m3 / f32_to_e5m2 on every
// rounding case (Fp8KvStoreRoundsEveryCaseAsTheCpu); NaN takes their code, which keeps its sign.
template <DType kFp8>
__device__ __forceinline__ uint32_t fp8x2_codes(float lo, float hi) {
  static_assert(kFp8 == DType::kFP8E4M3 || kFp8 == DType::kFP8E5M2, "e4m3 or e5m2");
  uint16_t r;
  if constexpr (kFp8 == DType::kFP8E4M3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  }
  uint32_t codes = r;
  if (isnan(lo) || isnan(hi)) [[unlikely]] {
    const auto code = [](float x) { return kFp8 == DType::kFP8E4M3 ? f32_to_e4m3(x) : f32_to_e5m2(x); };
    codes = uint32_t{code(lo)} | (uint32_t{code(hi)} << 8);
  }
  return codes;
}

// FP8 rows (Backend::quantize_fp8_rows): codes are e4m3(x * fp8_row_inv(amax)), the scale
// fp8_row_scale(amax); every kernel that writes FP8 rows uses these two and core/dtype.h's rounding
// (fp8x2_codes, or f32_to_e4m3 for a lone value).
__device__ __forceinline__ float fp8_row_inv(float amax) { return amax > 0.0f ? kE4M3Max / amax : 0.0f; }
__device__ __forceinline__ float fp8_row_scale(float amax) { return amax > 0.0f ? amax / kE4M3Max : 1.0f; }
// Eight FP8 codes in one 8-byte store (q 8-byte aligned).
template <DType kFp8>
__device__ __forceinline__ void store_fp8x8(uint8_t* q, const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = fp8x2_codes<kFp8>(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint2*>(q) = uint2{w[0] | (w[1] << 16), w[2] | (w[3] << 16)};
}
__device__ __forceinline__ void store_e4m3x8(uint8_t* q, const float (&f)[8], float inv) {
  float s[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) s[j] = f[j] * inv;
  store_fp8x8<DType::kFP8E4M3>(q, s);
}

}  // namespace serve8
