// Argument checks, dtype mapping and cuBLASLt's arguments shared by the CUDA backend's op files.
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/skinny_gemm.h"
#include "core/error.h"

namespace serve8::cuda_ops {

inline void check_dtype(const Tensor& t, DType want, const char* op, const char* name) {
  SERVE8_CHECK(t.dtype == want, "{}: {} is {}, expected {}", op, name, dtype_name(t.dtype), dtype_name(want));
}

// Activations of the elementwise ops: bf16, or fp32 (fp32 compute). Either works on a backend of
// either compute dtype; the model allocates them in compute_dtype().
inline void check_activation(const Tensor& t, const char* op, const char* name) {
  SERVE8_CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kF32, "{}: {} is {}, expected bf16 or fp32", op, name,
               dtype_name(t.dtype));
}

inline void check_present(const Tensor& t, const char* op, const char* name) {
  SERVE8_CHECK(!t.empty() || t.numel() == 0, "{}: {} has no data", op, name);
}

// FP8 rows of an [R, K] output: q e4m3 [R, K], scale fp32 [R].
inline void check_fp8_rows(const Fp8Rows& f, const Tensor& out, const char* op) {
  check_dtype(f.q, DType::kFP8E4M3, op, "fp8 q");
  check_dtype(f.scale, DType::kF32, op, "fp8 scale");
  SERVE8_CHECK(out.ndim == 2 && f.q.ndim == 2 && f.q.dim(0) == out.dim(0) && f.q.dim(1) == out.dim(1) &&
                   f.scale.ndim == 1 && f.scale.dim(0) == out.dim(0),
               "{}: fp8 q {} and scale {} must be [R, K] and [R] for out {}", op, f.q.shape_str(), f.scale.shape_str(),
               out.shape_str());
}

inline int64_t rows_of(const Tensor& t) { return t.ndim == 0 || t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1); }

inline int to_int(int64_t v, const char* op, const char* what) {
  SERVE8_CHECK(v >= 0 && v <= INT32_MAX, "{}: {} = {} does not fit the kernels' int", op, what, v);
  return static_cast<int>(v);
}

inline cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kFP8E5M2:
      return CUDA_R_8F_E5M2;
    case DType::kFP8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      return CUDA_R_32I;
  }
  return CUDA_R_32F;
}

// cuBLASLt's arguments for out[M, N] = x[M, K] · w[N, K]^T (+ bias), types from the tensors
// (checked by the caller); e4m3 operands add their scales.
inline GemmArgs gemm_args(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, int64_t m) {
  GemmArgs a;
  a.x = x.data;
  a.w = w.data;
  a.bias = bias ? bias->data : nullptr;
  a.out = out.data;
  a.m = m;
  a.n = w.dim(0);
  a.k = w.dim(1);
  a.in_type = cuda_type(x.dtype);
  a.out_type = cuda_type(out.dtype);
  a.bias_type = bias ? cuda_type(bias->dtype) : CUDA_R_16BF;
  return a;
}

// The skinny kernel's arguments for out[M, N] = x[M, K] · w[N, K]^T (+ bias): tokens and weights
// bf16 or e4m3 as the tensors are (checked by the caller), w_scale for e4m3 weights; the caller
// adds an x_scale for e4m3 tokens.
inline SkinnyGemmArgs skinny_args(const Tensor& x, const Tensor& w, const Tensor* w_scale, const Tensor* bias,
                                  const Tensor& out, int64_t m) {
  SkinnyGemmArgs g;
  g.x = x.data;
  g.x_bf16 = x.dtype == DType::kBF16;
  g.w = w.ptr<const uint8_t>();
  g.w_bf16 = w.dtype == DType::kBF16;
  g.w_scale = w_scale ? w_scale->ptr<const float>() : nullptr;
  g.bias = bias ? bias->data : nullptr;
  g.bias_f32 = bias && bias->dtype == DType::kF32;
  g.out = out.data;
  g.out_f32 = out.dtype == DType::kF32;
  g.m = m;
  g.n = w.dim(0);
  g.k = w.dim(1);
  return g;
}

}  // namespace serve8::cuda_ops
