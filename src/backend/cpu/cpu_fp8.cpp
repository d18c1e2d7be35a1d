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

namespace {

// out[i, j] = (x[i] · codes[j]) * x_scale[i] * w_scale[j] + bias[j]: the e4m3 weight codes widened
// exactly and summed in fp32, the scales applied to the sums as the GPU kernels apply them; xf
// [m, k] fp32, x_scale nullptr for 1.
void scaled_gemm(std::string_view op, int64_t m, const float* xf, const float* x_scale, const Tensor& wq,
                 const Tensor& w_scale, const Tensor* bias, Tensor out) {
  const int64_t n = wq.dim(0), k = wq.dim(1);
  SERVE8_CHECK(out.numel() == m * n && out.dim(-1) == n, "{}: out has shape {}, expected [{}, {}]", op, out.shape_str(),
               m, n);
  check_dtype(w_scale, DType::kF32, op, "w_scale");
  check_shape(w_scale, {n}, op, "w_scale");
  check_blas_gemm(op, m, n, k, bias);
  if (m == 0 || n == 0) return;
  std::vector<float> acc(static_cast<size_t>(m * n));
  gemm_f32_out(m, n, k, xf, wq, acc.data());
  std::vector<float> b;
  if (bias) {
    b.resize(static_cast<size_t>(n));
    load_f32(*bias, 0, n, b.data());
  }
  const float* ws = w_scale.ptr<const float>();
#pragma omp parallel for schedule(static) if (m * n >= kParallelMinElements)
  for (int64_t i = 0; i < m; ++i) {
    float* row = acc.data() + i * n;
    const float xs = x_scale ? x_scale[i] : 1.0f;
    for (int64_t j = 0; j < n; ++j) row[j] = row[j] * xs * ws[j] + (b.empty() ? 0.0f : b[static_cast<size_t>(j)]);
    store_f32(row, n, out, i * n);
  }
}

void check_fp8_weights(std::string_view op, const Tensor& x, const char* x_name, const Tensor& wq, const Tensor& out) {
  check_tensor(x, op, x_name);
  check_tensor(wq, op, "wq");
  check_tensor(out, op, "out");
  check_dtype(wq, DType::kFP8E4M3, op, "wq");
  check_float(out, op, "out");
  SERVE8_CHECK(x.ndim == 2 && wq.ndim == 2, "{}: {} {} and wq {} must be [M, K] and [N, K]", op, x_name, x.shape_str(),
               wq.shape_str());
  SERVE8_CHECK(wq.dim(1) == x.dim(1), "{}: {} {} and wq {} disagree on K", op, x_name, x.shape_str(), wq.shape_str());
}

}  // namespace

void gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
              Tensor out) {
  constexpr std::string_view op = "gemm_fp8";
  check_fp8_weights(op, xq, "xq", wq, out);
  check_dtype(xq, DType::kFP8E4M3, op, "xq");
  const int64_t m = xq.dim(0), k = xq.dim(1);
  check_dtype(x_scale, DType::kF32, op, "x_scale");
  check_shape(x_scale, {m}, op, "x_scale");
  std::vector<float> xf(static_cast<size_t>(m * k));
  const uint8_t* codes = xq.ptr<const uint8_t>();
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinElements)
  for (int64_t i = 0; i < m * k; ++i) xf[static_cast<size_t>(i)] = kE4M3Table[codes[i]];
  scaled_gemm(op, m, xf.data(), x_scale.ptr<const float>(), wq, w_scale, bias, out);
}

void gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias, Tensor out) {
  constexpr std::string_view op = "gemm_fp8_weights";
  check_fp8_weights(op, x, "x", wq, out);
  check_float(x, op, "x");
  const int64_t m = x.dim(0), k = x.dim(1);
  std::vector<float> xf(static_cast<size_t>(m * k));
  load_f32(x, 0, m * k, xf.data());
  scaled_gemm(op, m, xf.data(), nullptr, wq, w_scale, bias, out);
}

}  // namespace serve8::cpu
