// The CPU backend's FP8 weight ops against their definitions: per-row e4m3 quantization, the
// scaled e4m3 GEMM and the weight-only one (unquantized inputs), checked in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"
#include "core/error.h"

namespace serve8 {
namespace {

using test::HostArray;
using test::Rng;

TEST(CpuFp8, QuantizedRowsRoundTripWithinE4m3Precision) {
  auto be = create_cpu_backend();
  Rng rng(7);
  const int64_t rows = 5, cols = 300;
  std::vector<float> v = rng.normals(static_cast<size_t>(rows * cols), 3.0f);
  for (int64_t j = 0; j < cols; ++j) v[static_cast<size_t>(2 * cols + j)] = 0.0f;  // an all-zero row
  v[static_cast<size_t>(3 * cols + 17)] = -1000.0f;                                // one large value
  HostArray x(DType::kF32, v), q(DType::kFP8E4M3, static_cast<size_t>(rows * cols)),
      s(DType::kF32, static_cast<size_t>(rows));
  be->quantize_fp8_rows(x.view({rows, cols}), q.view({rows, cols}), s.view({rows}));
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0.0;
    for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(static_cast<double>(v[r * cols + j])));
    const double scale = s.get(static_cast<size_t>(r));
    if (amax == 0.0) {
      EXPECT_EQ(scale, 1.0) << "row " << r;
    } else {
      EXPECT_NEAR(scale, amax / 448.0, 1e-6 * amax) << "row " << r;
    }
    double largest = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const double back = q.get(static_cast<size_t>(r * cols + j)) * scale, want = v[r * cols + j];
      largest = std::max(largest, std::fabs(back));
      // e4m3 keeps 3 mantissa bits: half an ulp is 1/16 relative; below 2^-6 (subnormals) the step
      // is 2^-9 of the scale.
      EXPECT_LE(std::fabs(back - want), std::max(std::fabs(want) / 16.0, scale * 0x1p-10) * 1.0001)
          << "row " << r << " col " << j;
    }
    EXPECT_NEAR(largest, amax, 1e-6 * amax) << "row " << r << ": the largest value maps to 448";
  }
}

TEST(CpuFp8, GemmIsTheScaledProductOfTheCodes) {
  auto be = create_cpu_backend();
  Rng rng(11);
  const int64_t m = 3, n = 37, k = 96;
  HostArray xq(DType::kFP8E4M3, rng.normals(static_cast<size_t>(m * k), 100.0f));
  HostArray wq(DType::kFP8E4M3, rng.normals(static_cast<size_t>(n * k), 100.0f));
  std::vector<float> xsv, wsv;
  for (int64_t i = 0; i < m; ++i) xsv.push_back(rng.uniform(0.001f, 0.01f));
  for (int64_t j = 0; j < n; ++j) wsv.push_back(rng.uniform(0.0001f, 0.001f));
  HostArray xs(DType::kF32, xsv), ws(DType::kF32, wsv), bias(DType::kF32, rng.normals(static_cast<size_t>(n)));
  HostArray out(DType::kF32, static_cast<size_t>(m * n));
  const Tensor b = bias.view({n});
  be->gemm_fp8(xq.view({m, k}), xs.view({m}), wq.view({n, k}), ws.view({n}), &b, out.view({m, n}));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t t = 0; t < k; ++t)
        acc += static_cast<double>(xq.get(static_cast<size_t>(i * k + t))) * wq.get(static_cast<size_t>(j * k + t));
      const double want =
          acc * xsv[static_cast<size_t>(i)] * wsv[static_cast<size_t>(j)] + bias.get(static_cast<size_t>(j));
      EXPECT_NEAR(out.get(static_cast<size_t>(i * n + j)), want, 1e-5 * (1.0 + std::fabs(want))) << i << "," << j;
    }
}

TEST(CpuFp8, QuantizedGemmApproximatesTheDenseOne) {
  auto be = create_cpu_backend();
  Rng rng(3);
  const int64_t m = 4, n = 64, k = 256;
  HostArray x(DType::kF32, rng.normals(static_cast<size_t>(m * k))),
      w(DType::kF32, rng.normals(static_cast<size_t>(n * k), 0.05f));
  HostArray xq(DType::kFP8E4M3, static_cast<size_t>(m * k)), wq(DType::kFP8E4M3, static_cast<size_t>(n * k));
  HostArray xs(DType::kF32, static_cast<size_t>(m)), ws(DType::kF32, static_cast<size_t>(n));
  HostArray dense(DType::kF32, static_cast<size_t>(m * n)), fp8(DType::kF32, static_cast<size_t>(m * n));
  be->quantize_fp8_rows(x.view({m, k}), xq.view({m, k}), xs.view({m}));
  be->quantize_fp8_rows(w.view({n, k}), wq.view({n, k}), ws.view({n}));
  be->gemm(x.view({m, k}), w.view({n, k}), nullptr, dense.view({m, n}));
  be->gemm_fp8(xq.view({m, k}), xs.view({m}), wq.view({n, k}), ws.view({n}), nullptr, fp8.view({m, n}));
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < static_cast<size_t>(m * n); ++i) {
    num += std::pow(fp8.get(i) - dense.get(i), 2);
    den += std::pow(dense.get(i), 2);
  }
  // Two e4m3 roundings of uniform relative error up to 1/16 each: a few percent in all.
  EXPECT_LT(std::sqrt(num / den), 0.05);
  EXPECT_GT(std::sqrt(num / den), 1e-4) << "suspiciously exact: were the operands quantized?";
}

TEST(CpuFp8, WeightOnlyGemmIsTheInputTimesTheScaledCodes) {
  auto be = create_cpu_backend();
  Rng rng(19);
  const int64_t m = 5, n = 41, k = 80;
  const std::vector<float> xv = rng.normals(static_cast<size_t>(m * k), 2.0f);
  HostArray x(DType::kF32, xv), wq(DType::kFP8E4M3, rng.normals(static_cast<size_t>(n * k), 100.0f));
  std::vector<float> wsv;
  for (int64_t j = 0; j < n; ++j) wsv.push_back(rng.uniform(0.0001f, 0.001f));
  HostArray ws(DType::kF32, wsv), bias(DType::kF32, rng.normals(static_cast<size_t>(n)));
  HostArray out(DType::kF32, static_cast<size_t>(m * n));
  const Tensor b = bias.view({n});
  be->gemm_fp8_weights(x.view({m, k}), wq.view({n, k}), ws.view({n}), &b, out.view({m, n}));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t t = 0; t < k; ++t)
        acc += static_cast<double>(xv[static_cast<size_t>(i * k + t)]) * wq.get(static_cast<size_t>(j * k + t));
      const double want = acc * wsv[static_cast<size_t>(j)] + bias.get(static_cast<size_t>(j));
      EXPECT_NEAR(out.get(static_cast<size_t>(i * n + j)), want, 1e-5 * (1.0 + std::fabs(want))) << i << "," << j;
    }
  // The inputs are used as they are: no e4m3 rounding of x (which would move the product by ~1/32).
  HostArray x1(DType::kF32, std::vector<float>(static_cast<size_t>(k), 1.0f + 0x1p-20f));
  HostArray w1(DType::kFP8E4M3, std::vector<float>(static_cast<size_t>(k), 1.0f)),
      s1(DType::kF32, std::vector<float>{1.0f});
  HostArray o1(DType::kF32, 1);
  be->gemm_fp8_weights(x1.view({1, k}), w1.view({1, k}), s1.view({1}), nullptr, o1.view({1, 1}));
  // Half the way to the rounded inputs' k: the BLAS's fp32 sum of k terms may round a few ulps off.
  EXPECT_NEAR(o1.get(0), k * (1.0 + 0x1p-20), k * 0x1p-21);
  EXPECT_NE(o1.get(0), static_cast<float>(k));
}

TEST(CpuFp8, RefusesWrongDtypesAndShapes) {
  auto be = create_cpu_backend();
  HostArray x(DType::kF32, 8), q(DType::kBF16, 8), s(DType::kF32, 2);
  EXPECT_THROW(be->quantize_fp8_rows(x.view({2, 4}), q.view({2, 4}), s.view({2})), Error);
  HostArray xq(DType::kFP8E4M3, 8), wq(DType::kFP8E4M3, 12), ws(DType::kF32, 3), out(DType::kF32, 6);
  EXPECT_THROW(be->gemm_fp8(xq.view({2, 4}), s.view({2}), wq.view({4, 3}), ws.view({3}), nullptr, out.view({2, 3})),
               Error);
  EXPECT_THROW(be->gemm_fp8_weights(x.view({2, 4}), wq.view({4, 3}), ws.view({3}), nullptr, out.view({2, 3})), Error);
  EXPECT_THROW(be->gemm_fp8_weights(xq.view({2, 4}), wq.view({3, 4}), ws.view({3}), nullptr, out.view({2, 3})), Error);
}

}  // namespace
}  // namespace serve8
