// Shared pieces of the CPU backend: element types for template dispatch, their conversions to and
// from fp32 (core/dtype.h, so the CPU and CUDA backends round identically), the dispatch helpers
// that turn a runtime DType into a template argument once per op, and entry-point checks.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace serve8::cpu {

// Ops touching fewer elements than this run on one thread: a parallel region costs more than
// such an op (a tiny model's decode step is nothing but these), far more on a busy machine.
inline constexpr int64_t kParallelMinElements = int64_t{1} << 15;

// Distinct types for the 16- and 8-bit formats, so that a template over the element type can tell
// bf16 from fp16 and E5M2 from E4M3.
struct Bf16 {
  uint16_t bits;
};
struct Half {
  uint16_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};
struct Fp8E4M3 {
  uint8_t bits;
};
// int4 KV: two codes (0..15) a byte, element 2i in the low nibble; value = min + code * scale.
struct Int4Pair {
  uint8_t bits;
};

// inline: explicit specializations of a variable template are not implicitly inline, and clang
// with ASan emits each one in every object that uses it (a multiple-definition link error).
template <typename T>
inline constexpr DType kDTypeOf = DType::kF32;
template <>
inline constexpr DType kDTypeOf<Bf16> = DType::kBF16;
template <>
inline constexpr DType kDTypeOf<Half> = DType::kF16;
template <>
inline constexpr DType kDTypeOf<Fp8E5M2> = DType::kFP8E5M2;
template <>
inline constexpr DType kDTypeOf<Fp8E4M3> = DType::kFP8E4M3;

// FP8 decodes through a 256-entry table: the same values as core/dtype.h, without the branches in
// the attention inner loop.
template <float (*kDecode)(uint8_t)>
std::array<float, 256> make_fp8_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = kDecode(static_cast<uint8_t>(i));
  return t;
}
inline const std::array<float, 256> kE5M2Table = make_fp8_table<e5m2_to_f32>();
inline const std::array<float, 256> kE4M3Table = make_fp8_table<e4m3_to_f32>();

inline float to_f32(float x) { return x; }
inline float to_f32(Bf16 x) { return bf16_to_f32(x.bits); }
inline float to_f32(Half x) { return f16_to_f32(x.bits); }
inline float to_f32(Fp8E5M2 x) { return kE5M2Table[x.bits]; }
inline float to_f32(Fp8E4M3 x) { return kE4M3Table[x.bits]; }
// An int8 KV code (stored with its top bit flipped), before its row's scale.
inline float to_f32(int8_t x) { return static_cast<float>(static_cast<int8_t>(x ^ 0x80)); }

template <typename T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
template <>
inline Bf16 from_f32<Bf16>(float x) {
  return Bf16{f32_to_bf16(x)};
}
template <>
inline Half from_f32<Half>(float x) {
  return Half{f32_to_f16(x)};
}
template <>
inline Fp8E5M2 from_f32<Fp8E5M2>(float x) {
  return Fp8E5M2{f32_to_e5m2(x)};
}
template <>
inline Fp8E4M3 from_f32<Fp8E4M3>(float x) {
  return Fp8E4M3{f32_to_e4m3(x)};
}

// Calls f.template operator()<T>() with T the element type of an activation/weight dtype (fp32,
// bf16, fp16). Anything else is an error naming the op.
template <typename F>
void dispatch_float(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::kF32:
      return f.template operator()<float>();
    case DType::kBF16:
      return f.template operator()<Bf16>();
    case DType::kF16:
      return f.template operator()<Half>();
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      break;
  }
  fail("{}: dtype {} is not supported here (expected fp32, bf16 or fp16)", op, dtype_name(t));
}

// As dispatch_float, over the KV storage dtypes (the three float types and both FP8 formats).
template <typename F>
void dispatch_kv(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::kF32:
      return f.template operator()<float>();
    case DType::kBF16:
      return f.template operator()<Bf16>();
    case DType::kF16:
      return f.template operator()<Half>();
    case DType::kFP8E5M2:
      return f.template operator()<Fp8E5M2>();
    case DType::kFP8E4M3:
      return f.template operator()<Fp8E4M3>();
    case DType::kI8:
      return f.template operator()<int8_t>();
    case DType::kI4:
      return f.template operator()<Int4Pair>();
    case DType::kI32:
      break;
  }
  fail("{}: KV storage dtype {} is not supported (expected fp32, bf16, fp16, fp8_e5m2, fp8_e4m3 or int8)", op,
       dtype_name(t));
}

// Entry-point checks: each throws serve8::Error naming the op, the argument and the values.
void check_tensor(const Tensor& t, std::string_view op, std::string_view name);
void check_dtype(const Tensor& t, DType want, std::string_view op, std::string_view name);
// fp32, bf16 or fp16. Checked before any OpenMP region, where an exception would terminate.
void check_float(const Tensor& t, std::string_view op, std::string_view name);
void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, std::string_view op, std::string_view name);

// Converts n elements starting at element `offset` of t (fp32, bf16 or fp16) to fp32, and back
// (rounding as core/dtype.h). The dense ops work on fp32 rows and convert at the edges.
void load_f32(const Tensor& t, int64_t offset, int64_t n, float* dst);
void store_f32(const float* src, int64_t n, const Tensor& t, int64_t offset);

// out[m, n] (fp32, row stride n) = x[m, k] · w[n, k]^T for fp32 rows x and w of any float or FP8
// dtype (widened a block of rows at a time), one gemv per row so a row's result does not depend on
// the batch. The GEMM ops' shared core; callers check shapes first.
void gemm_f32_out(int64_t m, int64_t n, int64_t k, const float* x, const Tensor& w, float* out);
// The GEMM ops' common checks: dimensions OpenBLAS's int holds, a float bias [N].
void check_blas_gemm(std::string_view op, int64_t m, int64_t n, int64_t k, const Tensor* bias);

}  // namespace serve8::cpu
