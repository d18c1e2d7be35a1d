#include "backend/cuda/fp8_gemm_plan.h"

#include <algorithm>

namespace serve8 {

Fp8SkinnyPlan plan_fp8_skinny(int64_t m, int64_t n, int64_t k, int sms) {
  Fp8SkinnyPlan p;
  if (m <= kFp8GemvMaxRows || m > kFp8SkinnyMaxRows || n < 1 || k < 64 || k % 64 != 0 || sms < 1) return p;
  const int64_t row_tiles = (n + kFp8SkinnyRowsPerBlock - 1) / kFp8SkinnyRowsPerBlock;
  if (row_tiles > kFp8SkinnyMaxRowTiles) return p;
  p.ok = true;
  p.lane_bytes = k % 128 == 0 ? 32 : 16;
  p.row_tiles = static_cast<int>(row_tiles);
  const int64_t steps = k / (4 * p.lane_bytes);
  const int64_t want = (4 * int64_t{sms} + row_tiles - 1) / row_tiles;
  int64_t splits = std::clamp<int64_t>(want, 1, std::min<int64_t>(kFp8SkinnyMaxSplits, std::max<int64_t>(1, steps / 4)));
  while (splits > 1 && static_cast<size_t>(splits * m * n) > kFp8SkinnyWorkspaceFloats) --splits;
  p.splits = static_cast<int>(splits);
  return p;
}

}  // namespace serve8
