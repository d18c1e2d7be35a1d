// The skinny FP8 GEMM's plan: which shapes it takes, its variants, and a split of K that fills the
// GPU without passing the workspace.
#include "backend/cuda/fp8_gemm_plan.h"

#include <gtest/gtest.h>

namespace serve8 {
namespace {

constexpr int kSms = 132;

TEST(Fp8SkinnyPlan, TakesTheRowsItWinsOnly) {
  EXPECT_FALSE(plan_fp8_skinny(1, 4096, 4096, kSms).ok);  // the GEMV's
  EXPECT_TRUE(plan_fp8_skinny(2, 4096, 4096, kSms).ok);
  EXPECT_TRUE(plan_fp8_skinny(4, 4096, 4096, kSms).ok);
  EXPECT_FALSE(plan_fp8_skinny(5, 4096, 4096, kSms).ok);  // cuBLASLt's
  EXPECT_FALSE(plan_fp8_skinny(0, 4096, 4096, kSms).ok);
  EXPECT_FALSE(plan_fp8_skinny(4, 4096, 4112, kSms).ok);  // K % 64
  EXPECT_FALSE(plan_fp8_skinny(4, int64_t{kFp8SkinnyMaxRowTiles} * 64 + 1, 4096, kSms).ok);
}

TEST(Fp8SkinnyPlan, LaneBytesAndRowTiles) {
  EXPECT_EQ(plan_fp8_skinny(2, 4096, 4096, kSms).lane_bytes, 32);
  EXPECT_EQ(plan_fp8_skinny(2, 960, 576, kSms).lane_bytes, 16);  // SmolLM2's hidden size
  EXPECT_EQ(plan_fp8_skinny(2, 100, 4096, kSms).row_tiles, 2);
}

TEST(Fp8SkinnyPlan, SplitsFillTheGpuWithinTheWorkspace) {
  const int64_t shapes[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {15360, 5120}, {5120, 5120},
                               {27648, 5120}, {5120, 13824}, {10240, 8192}, {8192, 8192}, {57344, 8192}, {8192, 28672},
                               {960, 576}, {576, 1536}};
  for (const auto& [n, k] : shapes) {
    for (const int64_t m : {2, 4}) {
      const Fp8SkinnyPlan p = plan_fp8_skinny(m, n, k, kSms);
      ASSERT_TRUE(p.ok) << n << "x" << k;
      const int64_t steps = k / (4 * p.lane_bytes);
      EXPECT_GE(p.splits, 1);
      EXPECT_LE(p.splits, kFp8SkinnyMaxSplits);
      EXPECT_TRUE(p.splits == 1 || steps / p.splits >= 4) << n << "x" << k << " M=" << m;
      EXPECT_TRUE(p.splits == 1 || static_cast<size_t>(p.splits * m * n) <= kFp8SkinnyWorkspaceFloats);
      // Four blocks per SM where K allows it.
      if (steps / 4 >= 16) {
        EXPECT_GE(int64_t{p.row_tiles} * p.splits, 4 * kSms) << n << "x" << k;
      }
    }
  }
  EXPECT_FALSE(plan_fp8_skinny(4, 1 << 20, 8192, kSms).ok);  // more row tiles than counters
}

}  // namespace
}  // namespace serve8
