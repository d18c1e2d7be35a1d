// The FP8 GEMM choices: which entries a GPU takes, and which verdict speaks for a row count.
#include "backend/cuda/gemm_choices.h"

#include <gtest/gtest.h>

#include "backend/cuda/skinny_gemm_plan.h"

namespace serve8::test {
namespace {

constexpr Fp8GemmChoice kTable[] = {
    {"H100", 4096, 4096, 8, true},        {"H100", 4096, 4096, 16, false},      {"H100", 4096, 4096, 32, false},
    {"H100", 4096, 4096, 64, true},       {"H200", 4096, 4096, 64, false},      {"H100", 6144, 4096, 64, true},
    {"H100", 4096, 4096, 4, false, true}, {"H100", 4096, 4096, 16, true, true}, {"H100", 6144, 4096, 64, false, true},
};

TEST(Fp8GemmChoices, AGpuTakesTheEntriesOfItsName) {
  EXPECT_EQ(fp8_gemm_choices_for(kTable, "NVIDIA H100 80GB HBM3").size(), 8u);
  EXPECT_EQ(fp8_gemm_choices_for(kTable, "NVIDIA H200").size(), 1u);
  EXPECT_TRUE(fp8_gemm_choices_for(kTable, "NVIDIA A100-SXM4-80GB").empty());
}

TEST(Fp8GemmChoices, TheFewestRowsTimedAtOrAboveSpeakForARowCount) {
  const auto h100 = fp8_gemm_choices_for(kTable, "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 1));
  EXPECT_TRUE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 8));
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 9));
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 32));
  EXPECT_TRUE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 33));
  EXPECT_TRUE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 64));
  // Past every row count timed, and on matrices never timed: serve8's kernels.
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 65));
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(h100, 4096, 14336, 8));
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(fp8_gemm_choices_for(kTable, "NVIDIA H200"), 4096, 4096, 64));
}

TEST(Fp8GemmChoices, ARowCountOnlyHearsTimingsOfTheKernelItRuns) {
  // 6144 x 4096 was timed at 64 rows only (the TMA kernel): 1-16 rows run the other kernel.
  const auto h100 = fp8_gemm_choices_for(kTable, "H100");
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(h100, 6144, 4096, kSkinnyMaxRows));
  EXPECT_TRUE(fp8_gemm_takes_cublaslt(h100, 6144, 4096, kSkinnyMaxRows + 1));
}

TEST(Fp8GemmChoices, Bf16WeightsTakeTheSkinnyKernelOnlyWhereItWasTimedFaster) {
  const auto h100 = fp8_gemm_choices_for(kTable, "H100");
  EXPECT_TRUE(bf16_gemm_takes_skinny(h100, 4096, 4096, 1));
  EXPECT_TRUE(bf16_gemm_takes_skinny(h100, 4096, 4096, 4));
  EXPECT_FALSE(bf16_gemm_takes_skinny(h100, 4096, 4096, 5));  // the 16-row verdict: cuBLASLt
  EXPECT_FALSE(bf16_gemm_takes_skinny(h100, 4096, 4096, 17));
  // Never timed at 1-16 rows (a 64-row entry is past the kernel) or never timed at all: cuBLASLt.
  EXPECT_FALSE(bf16_gemm_takes_skinny(h100, 6144, 4096, 1));
  EXPECT_FALSE(bf16_gemm_takes_skinny(h100, 4096, 14336, 1));
  // The FP8 verdicts ignore the bf16 ones: 4096 x 4096 at 1-8 rows stays cuBLASLt's, at 9-16 serve8's.
  EXPECT_TRUE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 4));
  EXPECT_FALSE(fp8_gemm_takes_cublaslt(h100, 4096, 4096, 16));
}

TEST(Fp8GemmChoices, TheTableCoversAMatrixOfEitherKindOnlyWhereItHasAVerdict) {
  const auto h100 = fp8_gemm_choices_for(kTable, "H100");
  EXPECT_TRUE(gemm_choices_cover(h100, false, 4096, 4096));
  EXPECT_TRUE(gemm_choices_cover(h100, true, 6144, 4096));
  EXPECT_FALSE(gemm_choices_cover(h100, true, 4096, 14336));
  EXPECT_FALSE(gemm_choices_cover(fp8_gemm_choices_for(kTable, "H200"), true, 4096, 4096));
  EXPECT_FALSE(gemm_choices_cover({}, false, 4096, 4096));
}

TEST(Fp8GemmChoices, ATimedShapeTakesCublasLtOnlyWhereItWinsByMoreThanTheMargin) {
  EXPECT_FALSE(gemm_timing_takes_library(13.2, 15.4));
  EXPECT_FALSE(gemm_timing_takes_library(20.0, 20.0));
  EXPECT_FALSE(gemm_timing_takes_library(80.1, 78.6));  // 1.9% faster: inside the 3% margin
  EXPECT_TRUE(gemm_timing_takes_library(101.1, 95.0));  // 6.0% faster
  EXPECT_TRUE(gemm_timing_takes_library(11.9, 10.3));
}

TEST(Fp8GemmChoices, TheMeasuredTableNamesAGpuAndDecodeRows) {
  ASSERT_FALSE(fp8_gemm_choices().empty());
  for (const Fp8GemmChoice& c : fp8_gemm_choices()) {
    EXPECT_TRUE(c.device == "H100" || c.device == "H200") << c.device;
    EXPECT_GT(c.n, 0);
    EXPECT_GT(c.k, 0);
    EXPECT_TRUE(c.rows >= 1 && c.rows <= (c.bf16 ? kSkinnyMaxRows : kSkinnyTmaMaxRows)) << c.rows;
  }
}

}  // namespace
}  // namespace serve8::test
