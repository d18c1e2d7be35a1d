// Device pieces shared by the attention kernels: how each KV storage dtype is loaded and
// dequantized, and the tensor-core building blocks (mma.sync m16n8k16, ldmatrix).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_utils.cuh"

namespace serve8 {

constexpr float kLog2e = 1.4426950408889634f;

// Eight consecutive stored elements: 16 bytes for 16-bit formats, 8 for FP8. All conversions to
// fp32 here are exact (every FP8 and fp16 value is an fp16/fp32 value).
template <DType kKv>
struct KvTraits;

template <>
struct KvTraits<DType::kBF16> {
  using Raw8 = uint4;
  static constexpr bool kMmaF16 = false;
  __device__ static void to_float8(const Raw8& r, float (&f)[8]) { unpack_bf16x8(r, f); }
  __device__ static float load1(const void* base, int64_t i) {
    return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
  }
};

__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return __half22float2(h);
}

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

template <>
struct KvTraits<DType::kF16> {
  using Raw8 = uint4;
  static constexpr bool kMmaF16 = true;  // fp16 operands for the tensor cores: nothing rounded
  __device__ static void to_float8(const Raw8& r, float (&f)[8]) {
    const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = half2_bits_to_float2(u[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  __device__ static float load1(const void* base, int64_t i) {
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(base)[i]));
  }
};

template <>
struct KvTraits<DType::kFP8E5M2> {
  using Raw8 = uint2;
  static constexpr bool kMmaF16 = true;  // FP8 values are fp16 values: operands by byte placement
  // Bytes 0 and 1 of the word (2 and 3 when kHigh) as an fp16 pair. An E5M2 byte is the high byte
  // of the fp16 with the same value: place the bytes, no arithmetic.
  template <bool kHigh = false>
  __device__ static uint32_t half2_bits(uint32_t bytes) {
    return __byte_perm(bytes, 0, kHigh ? 0x3424 : 0x1404);
  }
  __device__ static uint4 to_half8(const Raw8& r) {
    return uint4{half2_bits(r.x), half2_bits<true>(r.x), half2_bits(r.y), half2_bits<true>(r.y)};
  }
  __device__ static void to_float8(const Raw8& r, float (&f)[8]) {
    const uint32_t u[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 lo = half2_bits_to_float2(half2_bits(u[i]));
      const float2 hi = half2_bits_to_float2(half2_bits<true>(u[i]));
      f[4 * i] = lo.x;
      f[4 * i + 1] = lo.y;
      f[4 * i + 2] = hi.x;
      f[4 * i + 3] = hi.y;
    }
  }
  __device__ static float load1(const void* base, int64_t i) {
    return __half2float(__ushort_as_half(static_cast<uint16_t>(static_cast<const uint8_t*>(base)[i] << 8)));
  }
};

template <>
struct KvTraits<DType::kFP8E4M3> {
  using Raw8 = uint2;
  static constexpr bool kMmaF16 = true;  // FP8 values are fp16 values: one cvt per two
  // Bytes 0 and 1 of the word (2 and 3 when kHigh) as an fp16 pair: cvt.rn.f16x2.e4m3x2 on sm_90,
  // two values per instruction, exact, on the word's half as a 16-bit register (a shift would cost
  // an instruction a conversion).
  template <bool kHigh = false>
  __device__ static uint32_t half2_bits(uint32_t bytes) {
    uint32_t h;
    if constexpr (kHigh) {
      asm("{.reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;}\n" : "=r"(h) : "r"(bytes));
    } else {
      asm("{.reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;}\n" : "=r"(h) : "r"(bytes));
    }
    return h;
  }
  __device__ static uint4 to_half8(const Raw8& r) {
    return uint4{half2_bits(r.x), half2_bits<true>(r.x), half2_bits(r.y), half2_bits<true>(r.y)};
  }
  __device__ static void to_float8(const Raw8& r, float (&f)[8]) {
    const uint32_t u[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 lo = half2_bits_to_float2(half2_bits(u[i]));
      const float2 hi = half2_bits_to_float2(half2_bits<true>(u[i]));
      f[4 * i] = lo.x;
      f[4 * i + 1] = lo.y;
      f[4 * i + 2] = hi.x;
      f[4 * i + 3] = hi.y;
    }
  }
  __device__ static float load1(const void* base, int64_t i) {
    return half2_bits_to_float2(half2_bits(static_cast<const uint8_t*>(base)[i])).x;
  }
};

// Loads the 8 stored elements starting at element index i (a multiple of 8).
template <DType kKv>
__device__ __forceinline__ typename KvTraits<kKv>::Raw8 load_raw8(const void* base, int64_t i) {
  using Raw8 = typename KvTraits<kKv>::Raw8;
  return reinterpret_cast<const Raw8*>(base)[i / 8];
}

// op on fp16 pairs held as 32-bit words.
template <typename Op, typename... Words>
__device__ __forceinline__ uint32_t half2_op_bits(Op op, Words... words) {
  const auto pair = [](uint32_t w) {
    __half2 x;
    memcpy(&x, &w, 4);
    return x;
  };
  const __half2 r = op(pair(words)...);
  uint32_t u;
  memcpy(&u, &r, 4);
  return u;
}
__device__ __forceinline__ uint32_t hsub2_bits(uint32_t a, uint32_t b) {
  return half2_op_bits([](__half2 x, __half2 y) { return __hsub2(x, y); }, a, b);
}
__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  return half2_op_bits([](__half2 x, __half2 y) { return __hmul2(x, y); }, a, b);
}
__device__ __forceinline__ uint32_t hfma2_bits(uint32_t a, uint32_t b, uint32_t c) {
  return half2_op_bits([](__half2 x, __half2 y, __half2 z) { return __hfma2(x, y, z); }, a, b, c);
}

// Two stored int8 codes (code + 128, dtype.h), bytes 0 and 1 of the word (2 and 3 when kHigh), as
// an fp16 pair, exact: 1024 + byte, less 1152.
template <bool kHigh = false>
__device__ __forceinline__ uint32_t i8x2_to_half2(uint32_t bytes) {
  return hsub2_bits(__byte_perm(bytes, 0x6464u, kHigh ? 0x4342 : 0x4140), 0x64806480u);
}
// The 4-bit codes in bits kShift..kShift+3 and 16+kShift..16+kShift+3 (kShift 0 or 4) as an fp16
// pair still biased, exact: one lop3 ((w & mask) | 0x6400 0x6400, which the compiler would split in
// two) puts them under fp16's exponent for 1024, as 1024 + code or 1024 + 16 code, so the high
// nibbles need no shift. For operands whose bias the caller takes out of the product.
template <int kShift>
__device__ __forceinline__ uint32_t i4x2_biased_at(uint32_t w) {
  static_assert(kShift == 0 || kShift == 4, "the low or the high nibble of bytes 0 and 2");
  uint32_t h;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(h) : "r"(w), "r"(0x000f000fu << kShift), "r"(0x64006400u));
  return h;
}
// The same codes unbiased: less 1024, or times 1/16 less 64.
template <int kShift>
__device__ __forceinline__ uint32_t i4x2_to_half2_at(uint32_t w) {
  const uint32_t h = i4x2_biased_at<kShift>(w);
  if constexpr (kShift == 0) {
    return hsub2_bits(h, 0x64006400u);
  } else {
    return hfma2_bits(h, 0x2c002c00u, 0xd400d400u);  // x / 16 - 64
  }
}
__device__ __forceinline__ uint32_t i4x2_to_half2(uint32_t nibbles) { return i4x2_to_half2_at<0>(nibbles); }

// int8 and int4 rows (rotated, KvLayer): 8 stored elements and their row's parameters. Their
// values are fp16 operands after the row's scale (and minimum): rounded once, to fp16.
template <>
struct KvTraits<DType::kI8> {
  struct Raw8 {
    uint2 c;   // eight int8 codes
    __half s;  // the row's scale, used only in to_half8: a prefetch must not wait for its load
  };
  static constexpr bool kMmaF16 = true;
  __device__ static Raw8 load(const void* pool, const void* params, bool is_v, int64_t row, int d, int col) {
    return Raw8{*reinterpret_cast<const uint2*>(static_cast<const int8_t*>(pool) + row * d + col),
                static_cast<const __half*>(params)[2 * row + is_v]};
  }
  __device__ static uint4 to_half8(const Raw8& r) {
    uint32_t h[4];
    const uint32_t u[2] = {r.c.x, r.c.y};
    // code x scale rounded once to fp16, as in fp32 then rounded: the product is exact either way.
    const __half2 s = __half2half2(r.s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 c;
      const uint32_t bits = i8x2_to_half2(u[i / 2] >> (16 * (i % 2)));
      memcpy(&c, &bits, 4);
      const __half2 v = __hmul2(c, s);
      memcpy(&h[i], &v, 4);
    }
    return uint4{h[0], h[1], h[2], h[3]};
  }
};

template <>
struct KvTraits<DType::kI4> {
  struct Raw8 {
    uint32_t c;   // eight codes, element 2i in the low nibble of byte i
    uint32_t sm;  // the row's fp16 scale (low half) and minimum
  };
  static constexpr bool kMmaF16 = true;
  __device__ static Raw8 load(const void* pool, const void* params, bool is_v, int64_t row, int d, int col) {
    return Raw8{*reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(pool) + (row * d + col) / 2),
                static_cast<const uint32_t*>(params)[2 * row + is_v]};
  }
  __device__ static uint4 to_half8(const Raw8& r) {
    const float2 sm = half2_bits_to_float2(r.sm);
    uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Byte i holds elements 2i (low nibble) and 2i + 1.
      const float2 f =
          half2_bits_to_float2(i4x2_to_half2(((r.c >> (8 * i)) & 15u) | (((r.c >> (8 * i + 4)) & 15u) << 16)));
      h[i] = pack_half2(sm.y + f.x * sm.x, sm.y + f.y * sm.x);
    }
    return uint4{h[0], h[1], h[2], h[3]};
  }
};

// The 8 stored elements at column col of pool row `row` (kv_row(slot, head)) of a d-wide head
// (with, for int8/int4, the K or V row's parameters).
template <DType kKv>
__device__ __forceinline__ typename KvTraits<kKv>::Raw8 load_kv8(const void* pool, const void* params, bool is_v,
                                                                 int64_t row, int d, int col) {
  if constexpr (kKv == DType::kI8 || kKv == DType::kI4) {
    return KvTraits<kKv>::load(pool, params, is_v, row, d, col);
  } else {
    return load_raw8<kKv>(pool, row * d + col);
  }
}

// ---- tensor cores ----

// Two fp32 values as the 16-bit operand type of the MMA (fp16 or bf16), low half first.
template <bool kF16>
__device__ __forceinline__ uint32_t pack_operand(float a, float b) {
  if constexpr (kF16) {
    return pack_half2(a, b);
  } else {
    // cvt.rn.bf16x2.f32: one instruction, round to nearest even as core/dtype.h.
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
  }
}

// d += a · b for a 16x16 (row) by 16x8 (col) tile, fp32 accumulators.
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 16-bit matrices from shared memory; lane l gives the address of row l % 8 of matrix
// l / 8. Without .trans lane l receives (row l/4, cols 2(l%4), +1) of each matrix; with .trans
// (rows 2(l%4), +1 of col l/4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// An 8x8 16-bit matrix held as lane l's (row l/4, cols 2(l%4), +1), transposed across the warp:
// lane l receives (rows 2(l%4), +1 of col l/4).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// 2^x with subnormal results flushed to zero (one MUFU.EX2; exp2f adds range fix-ups): for
// softmax weights, where what falls below 2^-126 of the maximum counts for nothing.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// exp2 that treats a -inf maximum (nothing seen yet) as contributing zero.
__device__ __forceinline__ float safe_exp2(float x, float m) { return m == -INFINITY ? 0.0f : exp2f(x - m); }

}  // namespace serve8
