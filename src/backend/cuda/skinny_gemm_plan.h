// The skinny FP8 GEMM's host-side plan (out[M, N] = x[M, K] · w[N, K]^T for a few rows): the
// weight matrix is cut into tiles of 64 output channels and the K axis into splits, so that every
// SM streams weights; the last block of a tile adds the splits' partial sums. Plain host code,
// built without CUDA, so CPU tests check it; skinny_gemm.cu runs it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace serve8 {

constexpr int kSkinnyTileN = 64;    // output channels a block computes (the wgmma's M)
constexpr int kSkinnyBlockK = 256;  // K bytes of each weight row per pipeline stage
// The most rows of e4m3 tokens in this kernel: from 17 the TMA kernel below takes them (bench_gemm,
// bench/README.md).
constexpr int kSkinnyMaxRows = 16;
// The most rows of bf16 tokens (weight-only FP8), where the alternative is widening the matrix.
constexpr int kSkinnyMaxRowsBf16 = 64;

// e4m3 tokens of 17-64 rows and bf16 ones of 33-64: the TMA kernel (skinny_gemm_tma.cu). A block
// of two consumer warpgroups computes 128 channels, so the token rows are read from L2 once a 128
// weight rows; a tile's K splits form one cluster that adds them in shared memory.
constexpr int kSkinnyTmaTileN = 128;
constexpr int kSkinnyTmaBlockK = 128;  // K bytes a stage: one 128-byte swizzle row
constexpr int kSkinnyTmaMaxRows = 64;
constexpr int kSkinnyTmaMaxSplits = 8;  // the portable cluster size
// Splits the plan chooses at most: bench_gemm timed 8 slower than 4 on every Llama shape.
constexpr int kSkinnyTmaPlanSplits = 4;

// The token tiles built (wgmma N), smallest first; a launch takes the smallest that holds M, or
// several of the widest (bf16 tokens past 32 rows; a 64-wide tile was slower, bench/README.md).
constexpr int kSkinnyTokenTiles[] = {8, 16, 32};
constexpr int kSkinnyTokenTileCount = 3;

// The index in kSkinnyTokenTiles of the tile a launch of m rows takes.
constexpr int skinny_token_tile_index(int64_t m) {
  int t = 0;
  while (t + 1 < kSkinnyTokenTileCount && kSkinnyTokenTiles[t] < m) ++t;
  return t;
}

// What the plan knows of the device.
struct SkinnyGemmShape {
  int sms = 0;
  int blocks_per_sm = 0;                  // resident blocks of the variant
  size_t max_workspace_bytes = 0;         // for partial sums
  int max_rows = kSkinnyMaxRows;          // kSkinnyMaxRowsBf16 for bf16 tokens
  int tma_blocks_per_sm = 0;              // the TMA kernel's; 0: not built for these tokens
  int tma_min_rows = kSkinnyMaxRows + 1;  // from these rows the TMA kernel takes them
};

struct SkinnyGemmPlan {
  // The TMA kernel (17-64 e4m3 rows, 33-64 bf16): token_tile 32 or 64, tiles of kSkinnyTmaTileN
  // channels, K blocks of kSkinnyTmaBlockK, the splits one cluster and no workspace.
  bool tma = false;
  int token_tile = 0;   // one of kSkinnyTokenTiles; 0: the shape is not for this kernel
  int token_tiles = 0;  // ceil(M / token_tile)
  int tiles_n = 0;      // ceil(N / 64)
  int kblocks = 0;      // ceil(K / 256)
  int kblocks_per_split = 0;
  int splits = 0;              // blocks per tile along K; the grid is token_tiles x tiles_n x splits
  size_t workspace_bytes = 0;  // fp32 partial sums when splits > 1
  int64_t blocks() const { return int64_t{token_tiles} * tiles_n * splits; }
};

// Refuses (token_tile 0) M outside 1..shape.max_rows or K not a multiple of 16; splits K so that
// the busiest SM streams the fewest K blocks, within the workspace. With shape.tma_blocks_per_sm,
// tma_min_rows to kSkinnyTmaMaxRows rows (K at least kSkinnyTmaBlockK) take the TMA kernel, its K
// split until its tiles fill the SMs' slots (at most kSkinnyTmaPlanSplits).
SkinnyGemmPlan plan_skinny_gemm(int64_t m, int64_t n, int64_t k, const SkinnyGemmShape& shape);
// The plan with about `splits` splits of K (clamped to 1..K blocks), for sweeps in bench_gemm.
SkinnyGemmPlan skinny_gemm_with_splits(int64_t m, int64_t n, int64_t k, int splits, int max_rows = kSkinnyMaxRows);
// The TMA kernel's plan for 17-64 e4m3 rows with `splits` splits (clamped to 1..kSkinnyTmaMaxSplits
// and the K blocks).
SkinnyGemmPlan skinny_tma_with_splits(int64_t m, int64_t n, int64_t k, int splits);

}  // namespace serve8
