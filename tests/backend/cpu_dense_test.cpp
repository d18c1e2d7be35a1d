// The CPU backend's token-parallel ops against naive double-precision references on random data.
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
using test::view_of;

// |got - want| <= tol * max(1, |want|) elementwise.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
  }
}

class CpuDenseTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = create_cpu_backend();
  Rng rng_{1234};
};

TEST_F(CpuDenseTest, BackendBasics) {
  EXPECT_EQ(be_->name(), "cpu");
  EXPECT_EQ(be_->compute_dtype(), DType::kF32);
  EXPECT_FALSE(be_->device_description().empty());
  EXPECT_GT(be_->free_memory(), 0u);
  EXPECT_GE(be_->total_memory(), be_->free_memory());
  Buffer buf(*be_, 1000);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  const auto* p = static_cast<const uint8_t*>(buf.data());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], 0) << i;
  std::vector<uint8_t> src(1000), back(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(rng_.integer(0, 255));
  be_->copy_to_device(buf.data(), src.data(), src.size());
  be_->copy_to_host(back.data(), buf.data(), back.size());
  be_->synchronize();
  EXPECT_EQ(src, back);
}

TEST_F(CpuDenseTest, Embedding) {
  const int64_t vocab = 50, h = 37, t = 11;
  for (DType table_t : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostArray table(table_t, rng_.normals(static_cast<size_t>(vocab * h)));
    std::vector<int32_t> ids(static_cast<size_t>(t));
    for (auto& id : ids) id = rng_.integer(0, static_cast<int32_t>(vocab - 1));
    std::vector<float> out(static_cast<size_t>(t * h));
    be_->embedding(table.view({vocab, h}), view_of(ids, {t}), view_of(out, {t, h}));
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < h; ++j) {
        ASSERT_EQ(out[static_cast<size_t>(i * h + j)],
                  table.get(static_cast<size_t>(ids[static_cast<size_t>(i)] * h + j)));
      }
    }
    ids[3] = static_cast<int32_t>(vocab);
    EXPECT_THROW(be_->embedding(table.view({vocab, h}), view_of(ids, {t}), view_of(out, {t, h})), Error);
  }
}

std::vector<double> rmsnorm_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t t, int64_t h,
                                double eps) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < t; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < h; ++j)
      ss += static_cast<double>(x[static_cast<size_t>(i * h + j)]) * x[static_cast<size_t>(i * h + j)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    for (int64_t j = 0; j < h; ++j) {
      out[static_cast<size_t>(i * h + j)] = x[static_cast<size_t>(i * h + j)] * inv * w[static_cast<size_t>(j)];
    }
  }
  return out;
}

TEST_F(CpuDenseTest, RmsNorm) {
  const int64_t t = 7, h = 129;
  const float eps = 1e-5f;
  std::vector<float> x = rng_.normals(static_cast<size_t>(t * h), 3.0f), w = rng_.normals(static_cast<size_t>(h));
  std::vector<float> out(x.size());
  be_->rmsnorm(view_of(x, {t, h}), view_of(w, {h}), eps, view_of(out, {t, h}));
  expect_close(out, rmsnorm_ref(x, w, t, h, eps), 1e-6);

  // bf16 in and out: the reference normalizes the same rounded inputs; one bf16 rounding apart.
  HostArray xb(DType::kBF16, x), wb(DType::kBF16, w), ob(DType::kBF16, x.size());
  be_->rmsnorm(xb.view({t, h}), wb.view({h}), eps, ob.view({t, h}));
  expect_close(ob.values(), rmsnorm_ref(xb.values(), wb.values(), t, h, eps), 1.0 / 128);

  EXPECT_THROW(be_->rmsnorm(view_of(x, {t, h}), view_of(w, {h - 1}), eps, view_of(out, {t, h})), Error);
}

TEST_F(CpuDenseTest, AddRmsNorm) {
  const int64_t t = 5, h = 96;
  const float eps = 1e-6f;
  std::vector<float> x = rng_.normals(static_cast<size_t>(t * h)), res = rng_.normals(static_cast<size_t>(t * h));
  std::vector<float> w = rng_.normals(static_cast<size_t>(h)), out(x.size());
  std::vector<float> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + res[i];
  be_->add_rmsnorm(view_of(x, {t, h}), view_of(res, {t, h}), view_of(w, {h}), eps, view_of(out, {t, h}));
  EXPECT_EQ(res, sum);
  expect_close(out, rmsnorm_ref(sum, w, t, h, eps), 1e-6);
}

std::vector<double> gemm_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                             int64_t m, int64_t n, int64_t k) {
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? (*bias)[static_cast<size_t>(j)] : 0.0;
      for (int64_t l = 0; l < k; ++l) {
        s += static_cast<double>(x[static_cast<size_t>(i * k + l)]) * w[static_cast<size_t>(j * k + l)];
      }
      out[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return out;
}

TEST_F(CpuDenseTest, GemmFp32) {
  for (int64_t m : {1, 5, 64}) {
    const int64_t n = 33, k = 70;
    std::vector<float> x = rng_.normals(static_cast<size_t>(m * k)), w = rng_.normals(static_cast<size_t>(n * k));
    std::vector<float> bias = rng_.normals(static_cast<size_t>(n)), out(static_cast<size_t>(m * n));
    be_->gemm(view_of(x, {m, k}), view_of(w, {n, k}), nullptr, view_of(out, {m, n}));
    expect_close(out, gemm_ref(x, w, nullptr, m, n, k), 1e-4);
    const Tensor b = view_of(bias, {n});
    be_->gemm(view_of(x, {m, k}), view_of(w, {n, k}), &b, view_of(out, {m, n}));
    expect_close(out, gemm_ref(x, w, &bias, m, n, k), 1e-4);
  }
  std::vector<float> x(10), w(12), out(4);
  EXPECT_THROW(be_->gemm(view_of(x, {2, 5}), view_of(w, {2, 6}), nullptr, view_of(out, {2, 2})), Error);
}

TEST_F(CpuDenseTest, GemmHalfWeightsFp32Out) {
  // N * K large enough that the weights are widened in several blocks (of 2^20 elements).
  const int64_t m = 3, n = 300, k = 4096;
  for (DType t : {DType::kBF16, DType::kF16}) {
    HostArray x(t, rng_.normals(static_cast<size_t>(m * k))), w(t, rng_.normals(static_cast<size_t>(n * k), 0.05f));
    HostArray bias(t, rng_.normals(static_cast<size_t>(n)));
    std::vector<float> out(static_cast<size_t>(m * n));
    const Tensor b = bias.view({n});
    be_->gemm(x.view({m, k}), w.view({n, k}), &b, view_of(out, {m, n}));
    const std::vector<float> bv = bias.values();
    const std::vector<double> want = gemm_ref(x.values(), w.values(), &bv, m, n, k);
    expect_close(out, want, 1e-4);
    // Same dtype out: one rounding of the fp32 result.
    HostArray out_h(t, static_cast<size_t>(m * n));
    be_->gemm(x.view({m, k}), w.view({n, k}), &b, out_h.view({m, n}));
    expect_close(out_h.values(), want, t == DType::kBF16 ? 1.0 / 128 : 1e-3);
  }
}

TEST_F(CpuDenseTest, Rope) {
  const int64_t t = 9, hq = 4, hkv = 2;
  for (int64_t d : {8, 64, 128}) {
    std::vector<float> q = rng_.normals(static_cast<size_t>(t * hq * d)),
                       k = rng_.normals(static_cast<size_t>(t * hkv * d));
    std::vector<float> q0 = q, k0 = k;
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (auto& p : pos) p = rng_.integer(0, 8191);
    std::vector<float> inv_freq(static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i) {
      inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(500000.0f, static_cast<float>(2 * i) / static_cast<float>(d));
    }
    be_->rope(view_of(q, {t, hq, d}), view_of(k, {t, hkv, d}), view_of(pos, {t}), view_of(inv_freq, {d / 2}));
    // The angle is formed in fp32 (the contract, as run.c does); the rotation in double.
    const auto ref = [&](const std::vector<float>& x, int64_t heads) {
      std::vector<double> out(x.size());
      for (int64_t r = 0; r < t * heads; ++r) {
        for (int64_t i = 0; i < d / 2; ++i) {
          const float angle =
              static_cast<float>(pos[static_cast<size_t>(r / heads)]) * inv_freq[static_cast<size_t>(i)];
          const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
          const double x0 = x[static_cast<size_t>(r * d + i)], x1 = x[static_cast<size_t>(r * d + i + d / 2)];
          out[static_cast<size_t>(r * d + i)] = x0 * c - x1 * s;
          out[static_cast<size_t>(r * d + i + d / 2)] = x0 * s + x1 * c;
        }
      }
      return out;
    };
    expect_close(q, ref(q0, hq), 1e-5);
    expect_close(k, ref(k0, hkv), 1e-5);
  }
}

TEST_F(CpuDenseTest, SiluMul) {
  const int64_t t = 6, inter = 77;
  std::vector<float> gu = rng_.normals(static_cast<size_t>(t * 2 * inter), 4.0f), out(static_cast<size_t>(t * inter));
  be_->silu_mul(view_of(gu, {t, 2 * inter}), view_of(out, {t, inter}));
  std::vector<double> want(out.size());
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < inter; ++j) {
      const double g = gu[static_cast<size_t>(i * 2 * inter + j)],
                   u = gu[static_cast<size_t>(i * 2 * inter + inter + j)];
      want[static_cast<size_t>(i * inter + j)] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  expect_close(out, want, 1e-6);
}

TEST_F(CpuDenseTest, GatherRows) {
  const int64_t n = 20, h = 13, m = 6;
  std::vector<float> x = rng_.normals(static_cast<size_t>(n * h)), out(static_cast<size_t>(m * h));
  std::vector<int32_t> rows = {19, 0, 7, 7, 3, 12};
  be_->gather_rows(view_of(x, {n, h}), view_of(rows, {m}), view_of(out, {m, h}));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < h; ++j) {
      ASSERT_EQ(out[static_cast<size_t>(i * h + j)], x[static_cast<size_t>(rows[static_cast<size_t>(i)] * h + j)]);
    }
  }
  rows[2] = -1;
  EXPECT_THROW(be_->gather_rows(view_of(x, {n, h}), view_of(rows, {m}), view_of(out, {m, h})), Error);
}

}  // namespace
}  // namespace serve8
