#include "backend/cuda/skinny_gemm_plan.h"

#include <algorithm>

namespace serve8 {
namespace {

// A block's pipeline fill costs about two K blocks' streaming time.
constexpr int64_t kFillBlocks = 2;

bool takes_tma(int64_t m, int64_t n, int64_t k, int min_rows) {
  return m >= min_rows && m <= kSkinnyTmaMaxRows && n >= 1 && k >= kSkinnyTmaBlockK && k % 16 == 0;
}

bool takes(int64_t m, int64_t n, int64_t k, int max_rows) {
  return m >= 1 && m <= std::min(max_rows, kSkinnyMaxRowsBf16) && n >= 1 && k >= 16 && k % 16 == 0;
}

SkinnyGemmPlan make_plan(int64_t m, int64_t n, int64_t k, int64_t per_split) {
  SkinnyGemmPlan p;
  p.token_tile = kSkinnyTokenTiles[skinny_token_tile_index(m)];
  p.token_tiles = static_cast<int>((m + p.token_tile - 1) / p.token_tile);
  p.tiles_n = static_cast<int>((n + kSkinnyTileN - 1) / kSkinnyTileN);
  p.kblocks = static_cast<int>((k + kSkinnyBlockK - 1) / kSkinnyBlockK);
  p.kblocks_per_split = static_cast<int>(std::clamp<int64_t>(per_split, 1, p.kblocks));
  p.splits = (p.kblocks + p.kblocks_per_split - 1) / p.kblocks_per_split;
  p.workspace_bytes =
      p.splits > 1 ? size_t(p.blocks()) * size_t{kSkinnyTileN} * size_t(p.token_tile) * sizeof(float) : 0;
  return p;
}

// splits 0: fill the shape's slots.
SkinnyGemmPlan plan_tma(int64_t m, int64_t n, int64_t k, const SkinnyGemmShape& shape, int64_t want = 0) {
  SkinnyGemmPlan p;
  p.tma = true;
  p.token_tile = m <= 32 ? 32 : 64;
  p.token_tiles = 1;
  p.tiles_n = static_cast<int>((n + kSkinnyTmaTileN - 1) / kSkinnyTmaTileN);
  p.kblocks = static_cast<int>((k + kSkinnyTmaBlockK - 1) / kSkinnyTmaBlockK);
  const int64_t slots = int64_t{shape.sms} * shape.tma_blocks_per_sm;
  const int64_t splits =
      std::clamp<int64_t>(want > 0 ? want : std::min<int64_t>(slots / p.tiles_n, kSkinnyTmaPlanSplits), 1,
                          std::min(kSkinnyTmaMaxSplits, p.kblocks));
  p.kblocks_per_split = static_cast<int>((p.kblocks + splits - 1) / splits);
  p.splits = (p.kblocks + p.kblocks_per_split - 1) / p.kblocks_per_split;
  return p;
}

}  // namespace

SkinnyGemmPlan plan_skinny_gemm(int64_t m, int64_t n, int64_t k, const SkinnyGemmShape& shape) {
  if (shape.sms < 1) return {};
  if (shape.tma_blocks_per_sm > 0 && takes_tma(m, n, k, shape.tma_min_rows)) return plan_tma(m, n, k, shape);
  if (!takes(m, n, k, shape.max_rows)) return {};
  const int64_t slots = int64_t{shape.sms} * std::max(1, shape.blocks_per_sm);
  // Cost in K blocks' time for the busiest slot: waves of blocks times each block's K blocks and
  // fill, plus one for reading the partials back.
  SkinnyGemmPlan best;
  int64_t best_cost = -1;
  for (int64_t per_split = (k + kSkinnyBlockK - 1) / kSkinnyBlockK; per_split >= 1; --per_split) {
    const SkinnyGemmPlan p = make_plan(m, n, k, per_split);
    if (p.splits > 1 && p.workspace_bytes > shape.max_workspace_bytes) break;
    const int64_t waves = (p.blocks() + slots - 1) / slots;
    const int64_t cost = waves * (p.kblocks_per_split + kFillBlocks) + (p.splits > 1 ? 1 : 0);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = p;
    }
  }
  return best;
}

SkinnyGemmPlan skinny_gemm_with_splits(int64_t m, int64_t n, int64_t k, int splits, int max_rows) {
  if (!takes(m, n, k, max_rows)) return {};
  const int64_t kblocks = (k + kSkinnyBlockK - 1) / kSkinnyBlockK;
  const int64_t s = std::clamp<int64_t>(splits, 1, kblocks);
  return make_plan(m, n, k, (kblocks + s - 1) / s);
}

SkinnyGemmPlan skinny_tma_with_splits(int64_t m, int64_t n, int64_t k, int splits) {
  if (!takes_tma(m, n, k, kSkinnyMaxRows + 1)) return {};
  return plan_tma(m, n, k, SkinnyGemmShape{}, std::max(1, splits));
}

}  // namespace serve8
