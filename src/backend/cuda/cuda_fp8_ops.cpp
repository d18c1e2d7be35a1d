// The CUDA backend's FP8 weight ops: per-row e4m3 quantization, the scaled FP8 GEMM (the skinny
// wgmma kernel up to 16 rows, its TMA kernel to 64, cuBLASLt for more: bench_gemm, bench/README.md)
// and the weight-only one (bf16 inputs: the skinny kernel up to 64 rows, a widened matrix above).
#include <cstdint>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_profiler.h"

namespace serve8 {

using cuda_ops::check_activation;
using cuda_ops::check_dtype;

namespace {

// The checks both FP8 GEMMs share: e4m3 weights [N, K] with fp32 scales [N], x [M, K], out [M, N]
// in the compute dtype, K a multiple of 16 (cuBLASLt's FP8 GEMMs take no other; every Llama-family
// hidden and MLP size is one), an optional bf16 or fp32 bias [N].
void check_fp8_gemm(const char* op, const Tensor& x, const char* x_name, const Tensor& wq, const Tensor& w_scale,
                    const Tensor* bias, const Tensor& out) {
  check_dtype(wq, DType::kFP8E4M3, op, "wq");
  check_dtype(w_scale, DType::kF32, op, "w_scale");
  check_activation(out, op, "out");
  SERVE8_CHECK(x.ndim == 2 && wq.ndim == 2 && x.dim(1) == wq.dim(1), "{}: {} {} and wq {} must be [M, K] and [N, K]",
               op, x_name, x.shape_str(), wq.shape_str());
  const int64_t m = x.dim(0), n = wq.dim(0), k = x.dim(1);
  SERVE8_CHECK(out.numel() == m * n && out.dim(-1) == n && w_scale.numel() == n,
               "{}: out {} and w_scale {} do not fit M={} N={}", op, out.shape_str(), w_scale.shape_str(), m, n);
  SERVE8_CHECK(k % 16 == 0, "{}: K = {} is not a multiple of 16", op, k);
  if (bias) {
    SERVE8_CHECK(bias->ndim == 1 && bias->dim(0) == n && (bias->dtype == DType::kBF16 || bias->dtype == DType::kF32),
                 "{}: bias {} {} must be bf16 or fp32 [{}]", op, dtype_name(bias->dtype), bias->shape_str(), n);
  }
}

}  // namespace

void CudaBackend::quantize_fp8_rows(const Tensor& x, Tensor q, Tensor scale) {
  on_device();
  const OpScope profile(profiler_, "quantize_fp8");
  constexpr const char* op = "quantize_fp8_rows";
  check_activation(x, op, "x");
  check_dtype(q, DType::kFP8E4M3, op, "q");
  check_dtype(scale, DType::kF32, op, "scale");
  SERVE8_CHECK(x.ndim == 2 && q.ndim == 2 && q.dim(0) == x.dim(0) && q.dim(1) == x.dim(1) && scale.ndim == 1 &&
                   scale.dim(0) == x.dim(0),
               "{}: x {}, q {} and scale {} must be [R, K], [R, K] and [R]", op, x.shape_str(), q.shape_str(),
               scale.shape_str());
  Fp8QuantParams p;
  p.dtype = x.dtype;
  p.x = x.data;
  p.q = q.ptr<uint8_t>();
  p.scale = scale.ptr<float>();
  p.rows = x.dim(0);
  p.cols = x.dim(1);
  launch_quantize_fp8_rows(p, stream_);
}

void CudaBackend::gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale,
                           const Tensor* bias, Tensor out) {
  on_device();
  const OpScope profile(profiler_, "gemm");
  constexpr const char* op = "gemm_fp8";
  check_dtype(xq, DType::kFP8E4M3, op, "xq");
  check_dtype(x_scale, DType::kF32, op, "x_scale");
  check_fp8_gemm(op, xq, "xq", wq, w_scale, bias, out);
  const int64_t m = xq.dim(0);
  SERVE8_CHECK(x_scale.numel() == m, "{}: x_scale {} does not fit M={}", op, x_scale.shape_str(), m);
  GemmArgs a = cuda_ops::gemm_args(xq, wq, bias, out, m);
  a.x_scale = x_scale.ptr<const float>();
  a.w_scale = w_scale.ptr<const float>();
  if (aligned16(xq.data) && aligned16(wq.data)) {
    SkinnyGemmArgs g = cuda_ops::skinny_args(xq, wq, &w_scale, bias, out, m);
    g.x_scale = x_scale.ptr<const float>();
    if (noting_gemms_) note_gemm(true, g, a);
    if (!fp8_gemm_takes_cublaslt(fp8_choices_, wq.dim(0), wq.dim(1), m) && skinny_->run(g, stream_)) return;
  }
  gemm_->run(a);
}

void CudaBackend::gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                                   Tensor out) {
  on_device();
  const OpScope profile(profiler_, "gemm");
  constexpr const char* op = "gemm_fp8_weights";
  check_activation(x, op, "x");
  check_fp8_gemm(op, x, "x", wq, w_scale, bias, out);
  const int64_t m = x.dim(0), n = wq.dim(0), k = x.dim(1);
  if (x.dtype == DType::kBF16 && aligned16(x.data) && aligned16(wq.data)) {
    if (skinny_->run(cuda_ops::skinny_args(x, wq, &w_scale, bias, out, m), stream_)) return;
  }
  // More rows than the skinny kernel takes: widen the matrix into the compute dtype (the product
  // of each code and its row's scale, rounded once) and run the dense GEMM on it.
  SERVE8_CHECK(n * k <= widened_elems_,
               "{}: a {} x {} matrix exceeds the {} elements reserved for widened weight-only FP8 matrices "
               "(reserve_steps)",
               op, n, k, widened_elems_);
  Fp8WidenParams p;
  p.dtype = compute_;
  p.q = wq.ptr<const uint8_t>();
  p.scale = w_scale.ptr<const float>();
  p.out = widened_;
  p.rows = n;
  p.cols = k;
  launch_widen_fp8_rows(p, stream_);
  gemm_->run(cuda_ops::gemm_args(x, Tensor(widened_, compute_, {n, k}), bias, out, m));
}

}  // namespace serve8
