// The int8 and int4 pools' rotation on the GPU: their kv_store (centre, rotate, quantize each row
// with its own parameters) and the Walsh-Hadamard transform of q and of the attention output.
// The rotation repeats the CPU reference's butterflies in its order, so rotated rows (and int8's
// codes) equal the CPU backend's bit for bit; int4's range search measures each value's error in
// steps, by a multiply-add with 1 / step where the CPU divides, and sums two interleaved
// halves of the row apart, so a near tie may pick another trim.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kWarpsPerBlock = 8;

// rintf(t) for |t| <= 2^22 (ties to even; inf and NaN pass through): past 1.5 * 2^23 floats are
// whole, so the add rounds. Beyond 2^22 it may be off by a fraction, which quant_int4's clamp
// hides. Two adds instead of rintf's FRND, which issues at a lower rate than adds, where the trim
// search rounds 30 x 128 values a row.
__device__ __forceinline__ float rint_small(float t) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: even, so t + kMagic keeps t's parity
  return __fsub_rn(__fadd_rn(t, kMagic), kMagic);
}

// The int4 code of x: rintf's, clamped to [0, 15], for every x.
__device__ __forceinline__ float quant_int4(float x, float lo, float inv) {
  return fminf(fmaxf(rint_small(__fmul_rn(__fsub_rn(x, lo), inv)), 0.0f), 15.0f);
}

// int4 candidate trim (a, b) = int4_trim(trim) (kv_layout.h) of a row's range [lo, lo + range]:
// its minimum l and step s, rounded as cpu_attention.cpp's fit_int4_row computes them.
__device__ __forceinline__ void int4_candidate(float lo, float range, int trim, float& l, float& s) {
  int a = 0, b = 0;
  int4_trim(trim, a, b);
  l = __fadd_rn(lo, __fmul_rn(__fmul_rn(0.02f, static_cast<float>(a)), range));
  s = __fdiv_rn(__fmul_rn(__fsub_rn(1.0f, __fmul_rn(0.02f, static_cast<float>(a + b))), range), 15.0f);
}

// One warp per (K or V, token, head) row.
template <DType kKv, int kE>
__global__ void kv_store_rotated_kernel(const KvStoreParams p) {
  allow_dependent_launch();
  constexpr int kD = 32 * kE;
  const int lane = threadIdx.x % 32;
  const int64_t per_tensor = int64_t{p.num_tokens} * p.num_kv_heads;
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (item >= 2 * per_tensor) return;
  const bool is_v = item >= per_tensor;
  const int64_t row = is_v ? item - per_tensor : item;  // token * Hkv + head
  const int token = static_cast<int>(row / p.num_kv_heads);
  const int head = static_cast<int>(row - int64_t{token} * p.num_kv_heads);
  const auto* src =
      static_cast<const uint16_t*>(is_v ? p.v : p.k) + token * (is_v ? p.v_stride : p.k_stride) + head * kD + lane * kE;
  const float* mean = (is_v ? p.v_mean : p.k_mean) + head * kD + lane * kE;
  const float scale = (is_v ? p.v_scale : p.k_scale)[head];
  float x[kE];
#pragma unroll
  for (int j = 0; j < kE; ++j) x[j] = bf16_bits_to_float(src[j]) - mean[j];
  warp_hadamard<kE>(x, p.norm);
#pragma unroll
  for (int j = 0; j < kE; ++j) x[j] = __fdiv_rn(x[j], scale);
  const int64_t at = kv_row(p.out_slots[token], head, p.num_kv_heads);
  // The row's parameters: record 2 at of row_params for K, 2 at + 1 for V.
  const int64_t record = 2 * at + (is_v ? 1 : 0);
  if constexpr (kKv == DType::kI8) {
    // Symmetric: the row's largest |value| maps to 127.
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kE; ++j) amax = fmaxf(amax, fabsf(x[j]));
    amax = warp_max(amax);
    // The stored fp16 scale (saturating, as the CPU's), against which the codes are taken.
    const __half s16 = __float2half_rn(fminf(__fdiv_rn(amax, 127.0f), kF16Max));
    const float rs = __half2float(s16);
    const float inv = rs > 0.0f ? __fdiv_rn(1.0f, rs) : 0.0f;
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < kE; ++j) {
      const int c = static_cast<int>(fminf(fmaxf(rintf(__fmul_rn(x[j], inv)), -127.0f), 127.0f));
      packed |= ((static_cast<uint32_t>(c) ^ 0x80u) & 0xffu) << (8 * j);  // offset by 128 (dtype.h)
    }
    auto* dst = static_cast<int8_t*>(is_v ? p.v_pool : p.k_pool) + at * kD + lane * kE;
    if constexpr (kE == 4) {
      *reinterpret_cast<uint32_t*>(dst) = packed;
    } else {
      *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(packed);
    }
    if (lane == 0) static_cast<__half*>(p.row_params)[record] = s16;
  } else {
    // 16 codes from min to min + 15 scale; of kv_layout.h's 16 trims of its ends the one with the
    // least squared error (cpu_attention.cpp's fit_int4_row). Two lanes score each trim, each over
    // half the row read back from shared memory.
    float lo = x[0], hi = x[0];
#pragma unroll
    for (int j = 1; j < kE; ++j) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
    lo = -warp_max(-lo);
    hi = warp_max(hi);
    const float range = hi - lo;
    float best_s = 0.0f, best_l = lo;
    if (range > 0.0f) {
      __shared__ __align__(16) float rows[kWarpsPerBlock][kD];
      float* xs = rows[threadIdx.x / 32];
#pragma unroll
      for (int j = 0; j < kE; ++j) xs[lane * kE + j] = x[j];
      __syncwarp();
      static_assert(kInt4Trims == 16, "two lanes a trim");
      const int trim = lane % kInt4Trims;
      float l = 0.0f, sc = 0.0f;
      int4_candidate(lo, range, trim, l, sc);
      const float inv = __frcp_rn(sc), off = -l * inv;
      // The error in steps: with u = (v - l) / s, code q - u is e / s, so a value costs 7
      // instructions instead of 9 (clamping u before rounding gives the clamped code).
      // A lane's half: every other four values, so that the two halves' reads (each a broadcast to
      // 16 lanes) fall in different banks.
      float err = 0.0f;
      const float4* fours = reinterpret_cast<const float4*>(xs) + lane / kInt4Trims;
#pragma unroll 4
      for (int j = 0; j < kD / 8; ++j) {
        const float4 v4 = fours[2 * j];
        for (const float v : {v4.x, v4.y, v4.z, v4.w}) {
          const float u = fmaf(v, inv, off);
          const float d = rint_small(fminf(fmaxf(u, 0.0f), 15.0f)) - u;
          err = fmaf(d, d, err);
        }
      }
      err += __shfl_xor_sync(0xffffffffu, err, kInt4Trims);
      // The least error, the lowest trim on a tie (the CPU's first minimum in its loop order).
      float best_err = err * (sc * sc);
      int best = trim;
#pragma unroll
      for (int m = kInt4Trims / 2; m >= 1; m >>= 1) {
        const float oe = __shfl_xor_sync(0xffffffffu, best_err, m);
        const int ob = __shfl_xor_sync(0xffffffffu, best, m);
        if (oe < best_err || (oe == best_err && ob < best)) best_err = oe, best = ob;
      }
      int4_candidate(lo, range, best, best_l, best_s);
    }
    // Codes against the stored fp16 parameters, which attention reads back.
    const __half s16 = __float2half_rn(best_s), l16 = __float2half_rn(best_l);
    const float s = __half2float(s16), l = __half2float(l16);
    const float inv = s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < kE; ++j) packed |= static_cast<uint32_t>(quant_int4(x[j], l, inv)) << (4 * j);
    auto* dst = static_cast<uint8_t*>(is_v ? p.v_pool : p.k_pool) + at * (kD / 2) + lane * (kE / 2);
    if constexpr (kE == 4) {
      *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(packed);
    } else {
      *dst = static_cast<uint8_t>(packed);
    }
    if (lane == 0) {
      static_cast<uint32_t*>(p.row_params)[record] =
          uint32_t{__half_as_ushort(s16)} | (uint32_t{__half_as_ushort(l16)} << 16);
    }
  }
}

template <int kE>
__global__ void hadamard_rows_kernel(const HadamardRowsParams p) {
  constexpr int kD = 32 * kE;
  const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (r >= p.rows) return;
  const float* mean = p.mean ? p.mean + (static_cast<int>(r % p.heads) / p.group) * kD : nullptr;
  hadamard_row<kE>(static_cast<const uint16_t*>(p.x) + r * kD, mean, p.norm, static_cast<uint16_t*>(p.out) + r * kD);
}

int warp_blocks(int64_t rows) { return static_cast<int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void launch_kv_store_rotated(const KvStoreParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int blocks = warp_blocks(2 * int64_t{p.num_tokens} * p.num_kv_heads);
  const bool i8 = p.kv_dtype == DType::kI8;
  if (p.head_dim == 128) {
    (i8 ? kv_store_rotated_kernel<DType::kI8, 4>
        : kv_store_rotated_kernel<DType::kI4, 4>)<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  } else {
    (i8 ? kv_store_rotated_kernel<DType::kI8, 2>
        : kv_store_rotated_kernel<DType::kI4, 2>)<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("kv_store_rotated_kernel");
}

void launch_hadamard_rows(const HadamardRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  const int blocks = warp_blocks(p.rows);
  if (p.head_dim == 128) {
    hadamard_rows_kernel<4><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  } else {
    hadamard_rows_kernel<2><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(p);
  }
  SERVE8_CUDA_CHECK_LAUNCH("hadamard_rows_kernel");
}

}  // namespace serve8
