// The skinny FP8 GEMM's plan: which shapes it takes, and that its splits cover K exactly.
#include "backend/cuda/skinny_gemm_plan.h"

#include <gtest/gtest.h>

namespace serve8::test {
namespace {

SkinnyGemmShape h200(size_t workspace = 32 << 20, int max_rows = kSkinnyMaxRows) {
  SkinnyGemmShape s;
  s.sms = 132;
  s.blocks_per_sm = 2;
  s.max_workspace_bytes = workspace;
  s.max_rows = max_rows;
  return s;
}

SkinnyGemmShape h200_bf16() { return h200(32 << 20, kSkinnyMaxRowsBf16); }

TEST(SkinnyGemmPlan, RefusesWhatTheKernelCannotTake) {
  EXPECT_EQ(plan_skinny_gemm(0, 4096, 4096, h200()).token_tile, 0);
  EXPECT_EQ(plan_skinny_gemm(kSkinnyMaxRows + 1, 4096, 4096, h200()).token_tile, 0);
  EXPECT_EQ(plan_skinny_gemm(1, 4096, 4104, h200()).token_tile, 0);  // K % 16
  EXPECT_EQ(plan_skinny_gemm(1, 0, 4096, h200()).token_tile, 0);
  // bf16 tokens (weight-only FP8) go to 64 rows, and no further whatever the caller allows.
  EXPECT_EQ(plan_skinny_gemm(kSkinnyMaxRowsBf16, 4096, 4096, h200_bf16()).token_tile, 32);
  EXPECT_EQ(plan_skinny_gemm(kSkinnyMaxRowsBf16 + 1, 4096, 4096, h200_bf16()).token_tile, 0);
  EXPECT_EQ(plan_skinny_gemm(65, 4096, 4096, h200(32 << 20, 1000)).token_tile, 0);
  EXPECT_EQ(skinny_gemm_with_splits(17, 4096, 4096, 1).token_tile, 0);
  EXPECT_EQ(skinny_gemm_with_splits(17, 4096, 4096, 1, kSkinnyMaxRowsBf16).token_tile, 32);
}

TEST(SkinnyGemmPlan, SmallestTokenTileThatHoldsTheRowsThenSeveral) {
  const int64_t cases[][3] = {{1, 8, 1},   {8, 8, 1},   {9, 16, 1},  {16, 16, 1},
                              {17, 32, 1}, {32, 32, 1}, {33, 32, 2}, {64, 32, 2}};
  for (const auto& [m, tile, tiles] : cases) {
    const SkinnyGemmPlan p = plan_skinny_gemm(m, 4096, 4096, h200_bf16());
    EXPECT_EQ(p.token_tile, tile) << m;
    EXPECT_EQ(p.token_tiles, tiles) << m;
    EXPECT_EQ(p.blocks(), int64_t{tiles} * p.tiles_n * p.splits) << m;
  }
}

TEST(SkinnyGemmPlan, SplitsCoverKWithNoEmptySplit) {
  const int64_t shapes[][2] = {{6144, 4096},  {4096, 4096},  {28672, 4096}, {4096, 14336}, {15360, 5120}, {5120, 13824},
                               {8192, 28672}, {57344, 8192}, {960, 576},    {576, 1536},   {100, 48},     {64, 16}};
  for (const auto& s : shapes) {
    for (const int64_t m : {1, 9, 16, 17, 64}) {
      const SkinnyGemmPlan p = plan_skinny_gemm(m, s[0], s[1], h200_bf16());
      ASSERT_NE(p.token_tile, 0) << s[0] << "x" << s[1];
      EXPECT_EQ(p.tiles_n, (s[0] + kSkinnyTileN - 1) / kSkinnyTileN);
      EXPECT_EQ(p.kblocks, (s[1] + kSkinnyBlockK - 1) / kSkinnyBlockK);
      EXPECT_GE(int64_t{p.splits} * p.kblocks_per_split, p.kblocks);
      EXPECT_LT(int64_t{p.splits - 1} * p.kblocks_per_split, p.kblocks) << "an empty split";
      EXPECT_EQ(p.workspace_bytes, p.splits > 1 ? size_t(p.blocks()) * kSkinnyTileN * size_t(p.token_tile) * 4 : 0);
    }
  }
}

TEST(SkinnyGemmPlan, SplitsKUntilEverySmStreams) {
  // Llama-3-8B's o projection has 64 tiles of channels: K is split so that the 132 SMs all read.
  const SkinnyGemmPlan o = plan_skinny_gemm(1, 4096, 4096, h200());
  EXPECT_GT(o.splits, 1);
  EXPECT_GE(o.blocks(), 132);
  EXPECT_LE(o.blocks(), 2 * 132);
  // Its gate_up projection has 448 tiles: no split.
  EXPECT_EQ(plan_skinny_gemm(1, 28672, 4096, h200()).splits, 1);
  // With no room for partials, no split either.
  EXPECT_EQ(plan_skinny_gemm(16, 4096, 4096, h200(1024)).splits, 1);
}

TEST(SkinnyGemmPlan, ForcedSplitsAreClampedToTheKBlocks) {
  EXPECT_EQ(skinny_gemm_with_splits(1, 4096, 4096, 4).splits, 4);
  EXPECT_EQ(skinny_gemm_with_splits(1, 4096, 4096, 4).kblocks_per_split, 4);
  EXPECT_EQ(skinny_gemm_with_splits(1, 4096, 5120, 3).splits, 3);  // 7 + 7 + 6 K blocks of 256
  EXPECT_EQ(skinny_gemm_with_splits(1, 4096, 4096, 1000).splits, 16);
  EXPECT_EQ(skinny_gemm_with_splits(1, 4096, 4096, 0).splits, 1);
  EXPECT_EQ(skinny_gemm_with_splits(1, 4096, 4100, 2).token_tile, 0);
}

SkinnyGemmShape h200_tma() {
  SkinnyGemmShape s = h200();
  s.tma_blocks_per_sm = 2;
  return s;
}

TEST(SkinnyGemmPlan, TmaKernelTakes17To64E4m3Rows) {
  EXPECT_FALSE(plan_skinny_gemm(16, 4096, 4096, h200_tma()).tma);
  EXPECT_EQ(plan_skinny_gemm(16, 4096, 4096, h200_tma()).token_tile, 16);
  const int64_t cases[][2] = {{17, 32}, {32, 32}, {33, 64}, {64, 64}};
  for (const auto& [m, tile] : cases) {
    const SkinnyGemmPlan p = plan_skinny_gemm(m, 4096, 4096, h200_tma());
    EXPECT_TRUE(p.tma) << m;
    EXPECT_EQ(p.token_tile, tile) << m;
    EXPECT_EQ(p.token_tiles, 1) << m;
    EXPECT_EQ(p.workspace_bytes, 0u) << m;
  }
  EXPECT_EQ(plan_skinny_gemm(65, 4096, 4096, h200_tma()).token_tile, 0);
  EXPECT_EQ(plan_skinny_gemm(32, 4096, 4104, h200_tma()).token_tile, 0);  // K % 16
  EXPECT_EQ(plan_skinny_gemm(32, 4096, 112, h200_tma()).token_tile, 0);   // K under one stage
  // bf16 tokens from 33 rows, in the 64-row tile; not where the kernel is not built for them.
  SkinnyGemmShape bf16 = h200_bf16();
  bf16.tma_blocks_per_sm = 2;
  bf16.tma_min_rows = 33;
  EXPECT_FALSE(plan_skinny_gemm(32, 4096, 4096, bf16).tma);
  EXPECT_EQ(plan_skinny_gemm(32, 4096, 4096, bf16).token_tile, 32);
  EXPECT_TRUE(plan_skinny_gemm(33, 4096, 4096, bf16).tma);
  EXPECT_EQ(plan_skinny_gemm(33, 4096, 4096, bf16).token_tile, 64);
  bf16.tma_blocks_per_sm = 0;
  EXPECT_FALSE(plan_skinny_gemm(40, 4096, 4096, bf16).tma);
}

TEST(SkinnyGemmPlan, TmaSplitsFillTheSlotsWithinAClusterAndCoverK) {
  // (N, K, splits): Llama-3-8B's o has 32 tiles of 128 channels, 264 slots: 4 splits (8 would
  // fill them); gate_up's 224 tiles fill the slots unsplit; Llama-2-13B's qkv 120 tiles: 2.
  const int64_t cases[][3] = {{4096, 4096, 4}, {6144, 4096, 4},  {28672, 4096, 1}, {4096, 14336, 4},
                              {5120, 5120, 4}, {15360, 5120, 2}, {57344, 8192, 1}, {8192, 28672, 4},
                              {100, 128, 1},   {200, 256, 2},    {960, 576, 3}};
  for (const auto& [n, k, splits] : cases) {
    const SkinnyGemmPlan p = plan_skinny_gemm(64, n, k, h200_tma());
    ASSERT_TRUE(p.tma) << n << "x" << k;
    EXPECT_EQ(p.tiles_n, (n + kSkinnyTmaTileN - 1) / kSkinnyTmaTileN);
    EXPECT_EQ(p.kblocks, (k + kSkinnyTmaBlockK - 1) / kSkinnyTmaBlockK);
    EXPECT_EQ(p.splits, splits) << n << "x" << k;
    EXPECT_LE(p.splits, kSkinnyTmaPlanSplits);
    EXPECT_GE(int64_t{p.splits} * p.kblocks_per_split, p.kblocks);
    EXPECT_LT(int64_t{p.splits - 1} * p.kblocks_per_split, p.kblocks) << "an empty split";
  }
}

TEST(SkinnyGemmPlan, ForcedTmaSplitsAreClampedToTheClusterAndKBlocks) {
  EXPECT_EQ(skinny_tma_with_splits(64, 4096, 4096, 3).splits, 3);  // 11 + 11 + 10 K blocks of 128
  EXPECT_EQ(skinny_tma_with_splits(64, 4096, 4096, 3).kblocks_per_split, 11);
  EXPECT_EQ(skinny_tma_with_splits(64, 4096, 4096, 100).splits, kSkinnyTmaMaxSplits);
  EXPECT_EQ(skinny_tma_with_splits(64, 4096, 256, 8).splits, 2);
  EXPECT_EQ(skinny_tma_with_splits(32, 4096, 4096, 0).splits, 1);
  EXPECT_FALSE(skinny_tma_with_splits(16, 4096, 4096, 2).tma);
  EXPECT_FALSE(skinny_tma_with_splits(65, 4096, 4096, 2).tma);
}

}  // namespace
}  // namespace serve8::test
