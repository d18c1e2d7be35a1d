// FP8 (e4m3) weights on the CPU: per-row quantization and the scaled GEMM, the reference the CUDA
// backend's FP8 GEMMs are checked against. The e4m3 codes are widened exactly to fp32 and summed
// there, so only the summation order differs from a GPU's.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace serve8::cpu {

void quantize_fp8_rows(const Tensor& x, Tensor q, Tensor scale) {
  constexpr std::string_view op = "quantize_fp8_rows";
  check_tensor(x, op, "x");
  check_float(x, op, "x");
  check_dtype(q, DType::kFP8E4M3, op, "q");
  check_dtype(scale, DType::kF32, op, "scale");
  SERVE8_CHECK(x.ndim == 2, "{}: x has shape {}, expected [R, K]", op, x.shape_str());
  const int64_t r = x.dim(0), k = x.dim(1);
  check_shape(q, {r, k}, op, "q");
  check_shape(scale, {r}, op, "scale");
#pragma omp parallel for schedule(static) if (r * k >= kParallelMinElements)
  for (int64_t i = 0; i < r; ++i) {
    std::vector<float> row(static_cast<size_t>(k));
    load_f32(x, i * k, k, row.data());
    float amax = 0.0f;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const float inv = amax > 0.0f ? kE4M3Max / amax : 0.0f;
    uint8_t* out = q.ptr<uint8_t>() + i * k;
    for (int64_t j = 0; j < k; ++j) out[j] = f32_to_e4m3(row[static_cast<size_t>(j)] * inv);
    scale.ptr<float>()[i] = amax > 0.0f ? amax / kE4M3Max : 1.0f;
  }
}

void gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
              Tensor out) {
  constexpr std::string_view op = "gemm_fp8";
  check_tensor(xq, op, "xq");
  check_tensor(wq, op, "wq");
  check_tensor(out, op, "out");
  check_dtype(xq, DType::kFP8E4M3, op, "xq");
  check_dtype(wq, DType::kFP8E4M3, op, "wq");
  check_float(out, op, "out");
  SERVE8_CHECK(xq.ndim == 2 && wq.ndim == 2, "{}: xq {} and wq {} must be [M, K] and [N, K]", op, xq.shape_str(),
               wq.shape_str());
  const int64_t m = xq.dim(0), k = xq.dim(1), n = wq.dim(0);
  SERVE8_CHECK(wq.dim(1) == k, "{}: xq {} and wq {} disagree on K", op, xq.shape_str(), wq.shape_str());
  SERVE8_CHECK(out.numel() == m * n && out.dim(-1) == n, "{}: out has shape {}, expected [{}, {}]", op, out.shape_str(),
               m, n);
  check_dtype(x_scale, DType::kF32, op, "x_scale");
  check_dtype(w_scale, DType::kF32, op, "w_scale");
  check_shape(x_scale, {m}, op, "x_scale");
  check_shape(w_scale, {n}, op, "w_scale");
  check_blas_gemm(op, m, n, k, bias);
  if (m == 0 || n == 0) return;

  std::vector<float> xf(static_cast<size_t>(m * k)), acc(static_cast<size_t>(m * n));
  const uint8_t* codes = xq.ptr<const uint8_t>();
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinElements)
  for (int64_t i = 0; i < m * k; ++i) xf[static_cast<size_t>(i)] = kE4M3Table[codes[i]];
  gemm_f32_out(m, n, k, xf.data(), wq, acc.data());
  std::vector<float> b;
  if (bias) {
    b.resize(static_cast<size_t>(n));
    load_f32(*bias, 0, n, b.data());
  }
  const float* xs = x_scale.ptr<const float>();
  const float* ws = w_scale.ptr<const float>();
#pragma omp parallel for schedule(static) if (m * n >= kParallelMinElements)
  for (int64_t i = 0; i < m; ++i) {
    float* row = acc.data() + i * n;
    for (int64_t j = 0; j < n; ++j) row[j] = row[j] * xs[i] * ws[j] + (b.empty() ? 0.0f : b[static_cast<size_t>(j)]);
    store_f32(row, n, out, i * n);
  }
}

}  // namespace serve8::cpu
