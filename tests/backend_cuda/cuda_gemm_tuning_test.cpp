// Start-up GEMM timing (--gemm-tuning): the GEMM calls between begin_gemm_tuning and
// end_gemm_tuning are timed per shape over their distinct weights, once; the verdict then steers
// the backend's gemm, whose sums stay the CPU's whichever kernel won.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "backend/cuda/gemm_choices.h"
#include "cuda_test_util.h"

namespace serve8::test {
namespace {

TEST_F(CudaBackendTest, GemmTuningTimesEachNotedShapeOnceAndKeepsTheVerdict) {
  gpu_->set_gemm_tuning(GemmTuning::kAll);
  const int64_t n = 1024, k = 2048;
  std::vector<DeviceArray> w16, w8;
  for (int i = 0; i < 3; ++i)
    w16.push_back(to_device(*gpu_, HostArray(DType::kBF16, rng_.normals(static_cast<size_t>(n * k), 0.05f))));
  for (int i = 0; i < 2; ++i)
    w8.push_back(to_device(*gpu_, HostArray(DType::kFP8E4M3, rng_.normals(static_cast<size_t>(n * k), 50.0f))));
  const HostArray ws(DType::kF32, std::vector<float>(static_cast<size_t>(n), 0.002f));
  auto dws = to_device(*gpu_, ws);
  const int64_t m16 = 4, m8 = 24;
  const HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(17 * k), 2.0f));
  const HostArray xq(DType::kFP8E4M3, rng_.normals(static_cast<size_t>(m8 * k), 50.0f));
  const HostArray xs(DType::kF32, std::vector<float>(static_cast<size_t>(m8), 0.01f));
  auto dx = to_device(*gpu_, x), dxq = to_device(*gpu_, xq), dxs = to_device(*gpu_, xs);
  Buffer out(*gpu_, static_cast<size_t>(17 * n) * 4);
  const auto bf16_gemm = [&](const DeviceArray& w, int64_t m) {
    gpu_->gemm(dx.view({m, k}), w.view({n, k}), nullptr, out.view(DType::kBF16, {m, n}));
  };

  gpu_->begin_gemm_tuning();
  for (const DeviceArray& w : w16) bf16_gemm(w, m16);
  bf16_gemm(w16[0], m16);  // the same weights again: still three layers
  for (const DeviceArray& w : w8)
    gpu_->gemm_fp8(dxq.view({m8, k}), dxs.view({m8}), w.view({n, k}), dws.view({n}), nullptr,
                   out.view(DType::kBF16, {m8, n}));
  bf16_gemm(w16[0], 17);  // past the bf16 skinny kernel: cuBLASLt alone, nothing to time
  const std::vector<GemmTiming> timed = gpu_->end_gemm_tuning();
  ASSERT_EQ(timed.size(), 2u);
  const GemmTiming& b = timed[0];
  EXPECT_FALSE(b.fp8);
  EXPECT_EQ(b.n, n);
  EXPECT_EQ(b.k, k);
  EXPECT_EQ(b.m, m16);
  EXPECT_EQ(b.layers, 3);
  const GemmTiming& f = timed[1];
  EXPECT_TRUE(f.fp8);
  EXPECT_EQ(f.m, m8);
  EXPECT_EQ(f.layers, 2);
  for (const GemmTiming& t : timed) {
    // Each launch reads 2-4 MB: more than a microsecond, far less than a millisecond.
    EXPECT_GT(t.ours_us, 1.0);
    EXPECT_LT(t.ours_us, 1000.0);
    EXPECT_GT(t.library_us, 1.0);
    EXPECT_LT(t.library_us, 1000.0);
    EXPECT_EQ(t.library, gemm_timing_takes_library(t.ours_us, t.library_us));
  }

  // A shape timed once is not timed again; with tuning off nothing is.
  gpu_->begin_gemm_tuning();
  bf16_gemm(w16[1], m16);
  EXPECT_TRUE(gpu_->end_gemm_tuning().empty());
  gpu_->set_gemm_tuning(GemmTuning::kOff);
  gpu_->begin_gemm_tuning();
  bf16_gemm(w16[1], 8);
  EXPECT_TRUE(gpu_->end_gemm_tuning().empty());
  gpu_->set_gemm_tuning(GemmTuning::kAll);

  // Whichever kernel the timing chose, the sums are the CPU's.
  gpu_->begin_gemm_tuning();
  bf16_gemm(w16[2], 2);
  ASSERT_EQ(gpu_->end_gemm_tuning().size(), 1u);
  const std::vector<float> xv = x.values();
  HostArray wf(DType::kF32, to_host(*gpu_, w16[2]).values());
  for (const int64_t m : {int64_t{2}, m16}) {
    HostArray ref(DType::kF32, static_cast<size_t>(m * n));
    HostArray xf(DType::kF32, std::vector<float>(xv.begin(), xv.begin() + m * k));
    cpu_->gemm(xf.view({m, k}), wf.view({n, k}), nullptr, ref.view({m, n}));
    poison(*gpu_, out.data(), out.bytes());
    bf16_gemm(w16[2], m);
    EXPECT_LT(rel_error(to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(m * n)).values(), ref.values()),
              4e-3)
        << "M=" << m;
  }
}

}  // namespace
}  // namespace serve8::test
