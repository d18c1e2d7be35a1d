// The skinny FP8 GEMM's host-side plan (out[M, N] = x[M, K] · w[N, K]^T for a few rows): the
// weight matrix is cut into tiles of 64 or 128 output channels and the K axis into splits, so that every
// SM streams weights; the last block of a tile adds the splits' partial sums. Plain host code,
// built without CUDA, so CPU tests check it; skinny_gemm.cu runs it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace serve8 {

constexpr int kSkinnyBlockK = 256;  // K bytes of each weight row per pipeline stage
// The most token rows, e4m3 or bf16 (weight-only FP8).
constexpr int kSkinnyMaxRows = 64;

// A block's tile: `tokens` rows (the wgmma's N) by `channels` output channels (64 a wgmma).
struct SkinnyTile {
  int tokens = 0;
  int channels = 0;
};
// The tiles built, [bf16 tokens][i], smallest first: a launch takes the smallest that holds M, or
// several of the last (bf16 tokens past 32 rows; a 64-wide bf16 tile was slower, bench/README.md).
// e4m3 past 16 rows: 64 rows over 128 channels, so that a block reads the token rows from L2 once
// for 128 weight rows instead of 64 (bench/README.md).
constexpr SkinnyTile kSkinnyTiles[2][3] = {{{8, 64}, {16, 64}, {64, 128}}, {{8, 64}, {16, 64}, {32, 64}}};
constexpr int kSkinnyTileCount = 3;

// The index in kSkinnyTiles[x_bf16] of the tile a launch of m rows takes.
constexpr int skinny_tile_index(int64_t m, bool x_bf16) {
  int t = 0;
  while (t + 1 < kSkinnyTileCount && kSkinnyTiles[x_bf16 ? 1 : 0][t].tokens < m) ++t;
  return t;
}

// What the plan knows of the device.
struct SkinnyGemmShape {
  int sms = 0;
  int blocks_per_sm = 0;           // resident blocks of the variant
  size_t max_workspace_bytes = 0;  // for partial sums
  bool x_bf16 = false;             // bf16 tokens (weight-only FP8), else e4m3
};

struct SkinnyGemmPlan {
  int token_tile = 0;   // the tile's tokens; 0: the shape is not for this kernel
  int tile_n = 0;       // the tile's channels
  int token_tiles = 0;  // ceil(M / token_tile)
  int tiles_n = 0;      // ceil(N / tile_n)
  int kblocks = 0;      // ceil(K / 256)
  int kblocks_per_split = 0;
  int splits = 0;              // blocks per tile along K; the grid is token_tiles x tiles_n x splits
  size_t workspace_bytes = 0;  // fp32 partial sums when splits > 1
  int64_t blocks() const { return int64_t{token_tiles} * tiles_n * splits; }
};

// Refuses (token_tile 0) M outside 1..kSkinnyMaxRows or K not a multiple of 16; splits K so that
// the busiest SM streams the fewest K blocks, within the workspace.
SkinnyGemmPlan plan_skinny_gemm(int64_t m, int64_t n, int64_t k, const SkinnyGemmShape& shape);
// The plan with about `splits` splits of K (clamped to 1..K blocks), for sweeps in bench_gemm.
SkinnyGemmPlan skinny_gemm_with_splits(int64_t m, int64_t n, int64_t k, int splits, bool x_bf16 = false);

}  // namespace serve8
