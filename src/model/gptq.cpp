#include "model/gptq.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace serve8 {

namespace {

// Each row's scale (amax / 448) and its inverse as `--quantization fp8` computes it (448 / amax),
// so that rounding to nearest here gives the codes quantizing at load does.
struct RowScales {
  std::vector<float> scale, inv;
};
RowScales row_scales(std::span<const float> w, int64_t n, int64_t k) {
  RowScales s{std::vector<float>(static_cast<size_t>(n)), std::vector<float>(static_cast<size_t>(n))};
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(w[static_cast<size_t>(i * k + j)]));
    s.scale[static_cast<size_t>(i)] = amax > 0.0f ? amax / kE4M3Max : 1.0f;
    s.inv[static_cast<size_t>(i)] = amax > 0.0f ? kE4M3Max / amax : 0.0f;
  }
  return s;
}

// Lower Cholesky factor of the symmetric a [k, k] in place (upper triangle left as is); false when
// a is not positive definite.
bool cholesky_lower(std::vector<double>& a, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    double d = a[static_cast<size_t>(j * k + j)];
    for (int64_t p = 0; p < j; ++p) d -= a[static_cast<size_t>(j * k + p)] * a[static_cast<size_t>(j * k + p)];
    if (!(d > 0.0)) return false;
    const double l = std::sqrt(d);
    a[static_cast<size_t>(j * k + j)] = l;
#pragma omp parallel for schedule(static) if (k >= 256)
    for (int64_t i = j + 1; i < k; ++i) {
      double v = a[static_cast<size_t>(i * k + j)];
      for (int64_t p = 0; p < j; ++p) v -= a[static_cast<size_t>(i * k + p)] * a[static_cast<size_t>(j * k + p)];
      a[static_cast<size_t>(i * k + j)] = v / l;
    }
  }
  return true;
}

// U upper triangular with U^T U = h^-1 (GPTQ's "Cholesky of the inverse"), [k, k] row-major.
std::vector<double> inverse_cholesky_upper(std::vector<double> h, int64_t k) {
  SERVE8_CHECK(cholesky_lower(h, k), "GPTQ: the inputs' second-moment matrix does not factor (raise the damping)");
  // L^-1 by forward substitution, then h^-1 = L^-T L^-1.
  std::vector<double> li(static_cast<size_t>(k * k), 0.0);
  for (int64_t c = 0; c < k; ++c) {
    li[static_cast<size_t>(c * k + c)] = 1.0 / h[static_cast<size_t>(c * k + c)];
    for (int64_t i = c + 1; i < k; ++i) {
      double v = 0.0;
      for (int64_t p = c; p < i; ++p) v -= h[static_cast<size_t>(i * k + p)] * li[static_cast<size_t>(p * k + c)];
      li[static_cast<size_t>(i * k + c)] = v / h[static_cast<size_t>(i * k + i)];
    }
  }
  std::vector<double> inv(static_cast<size_t>(k * k));
#pragma omp parallel for schedule(dynamic, 8) if (k >= 256)
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double v = 0.0;
      for (int64_t p = i; p < k; ++p) v += li[static_cast<size_t>(p * k + i)] * li[static_cast<size_t>(p * k + j)];
      inv[static_cast<size_t>(i * k + j)] = inv[static_cast<size_t>(j * k + i)] = v;
    }
  }
  SERVE8_CHECK(cholesky_lower(inv, k), "GPTQ: the inverse of the inputs' second moments does not factor");
  std::vector<double> u(static_cast<size_t>(k * k), 0.0);  // the lower factor, transposed
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j <= i; ++j) u[static_cast<size_t>(j * k + i)] = inv[static_cast<size_t>(i * k + j)];
  return u;
}

}  // namespace

Fp8Matrix round_fp8_rows(std::span<const float> w, int64_t n, int64_t k) {
  SERVE8_CHECK(n >= 0 && k >= 0 && static_cast<int64_t>(w.size()) == n * k, "FP8 rounding: {} weights are not {} x {}",
               w.size(), n, k);
  RowScales rs = row_scales(w, n, k);
  Fp8Matrix m{std::vector<uint8_t>(w.size()), std::move(rs.scale)};
  for (int64_t i = 0; i < n; ++i) {
    const float inv = rs.inv[static_cast<size_t>(i)];
    for (int64_t j = 0; j < k; ++j)
      m.codes[static_cast<size_t>(i * k + j)] = f32_to_e4m3(w[static_cast<size_t>(i * k + j)] * inv);
  }
  return m;
}

Fp8Matrix round_fp8_rows_gptq(std::span<const float> w, int64_t n, int64_t k, std::span<const double> h, double damp,
                              bool act_order) {
  SERVE8_CHECK(n >= 0 && k >= 0 && static_cast<int64_t>(w.size()) == n * k && static_cast<int64_t>(h.size()) == k * k &&
                   damp >= 0.0,
               "GPTQ: {} weights and a {}-entry H do not make an {} x {} matrix (damping {})", w.size(), h.size(), n, k,
               damp);
  RowScales rs = row_scales(w, n, k);
  Fp8Matrix m{std::vector<uint8_t>(w.size()), std::move(rs.scale)};
  if (n == 0 || k == 0) return m;
  // Column order: perm[i] is the input rounded i-th; hd is H in that order.
  std::vector<int64_t> perm(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) perm[static_cast<size_t>(i)] = i;
  if (act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
      return h[static_cast<size_t>(x * k + x)] > h[static_cast<size_t>(y * k + y)];
    });
  std::vector<double> hd(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j)
      hd[static_cast<size_t>(i * k + j)] =
          h[static_cast<size_t>(perm[static_cast<size_t>(i)] * k + perm[static_cast<size_t>(j)])];
  std::vector<uint8_t> dead(static_cast<size_t>(k), 0);
  double mean_diag = 0.0;
  for (int64_t i = 0; i < k; ++i) mean_diag += hd[static_cast<size_t>(i * k + i)];
  mean_diag = mean_diag > 0.0 ? mean_diag / static_cast<double>(k) : 1.0;
  for (int64_t i = 0; i < k; ++i) {
    double& d = hd[static_cast<size_t>(i * k + i)];
    if (d <= 0.0) {  // an input that is always zero: its weights matter to nothing, round them alone
      dead[static_cast<size_t>(i)] = 1;
      for (int64_t j = 0; j < k; ++j) hd[static_cast<size_t>(i * k + j)] = hd[static_cast<size_t>(j * k + i)] = 0.0;
      d = 1.0;
    }
    d += damp * mean_diag;
  }
  const std::vector<double> u = inverse_cholesky_upper(std::move(hd), k);
#pragma omp parallel for schedule(static) if (n * k * k >= (int64_t{1} << 24))
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> row(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i)
      row[static_cast<size_t>(i)] = w[static_cast<size_t>(r * k + perm[static_cast<size_t>(i)])];
    const float s = m.scale[static_cast<size_t>(r)], inv = rs.inv[static_cast<size_t>(r)];
    for (int64_t i = 0; i < k; ++i) {
      // Spread errors can push a later weight past the row's largest: clamp to the grid's end.
      const float x = std::clamp(static_cast<float>(row[static_cast<size_t>(i)]) * inv, -kE4M3Max, kE4M3Max);
      const uint8_t c = f32_to_e4m3(x);
      m.codes[static_cast<size_t>(r * k + perm[static_cast<size_t>(i)])] = c;
      if (dead[static_cast<size_t>(i)]) continue;
      const double err = (row[static_cast<size_t>(i)] - double{e4m3_to_f32(c)} * s) / u[static_cast<size_t>(i * k + i)];
      for (int64_t j = i + 1; j < k; ++j) row[static_cast<size_t>(j)] -= err * u[static_cast<size_t>(i * k + j)];
    }
  }
  return m;
}

std::vector<float> fp8_matrix_values(const Fp8Matrix& m, int64_t n, int64_t k) {
  std::vector<float> v(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      v[static_cast<size_t>(i * k + j)] =
          e4m3_to_f32(m.codes[static_cast<size_t>(i * k + j)]) * m.scale[static_cast<size_t>(i)];
  return v;
}

}  // namespace serve8
