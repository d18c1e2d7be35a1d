// How many split-KV blocks a decode launch gets per (sequence, KV head): plain host arithmetic,
// kept apart from the CUDA code so CPU tests can check it.
//
// Decode streams K/V; a block's fixed costs (the pipeline filling, the final merge) are paid per
// split, and a launch whose last wave fills few of the resident slots idles the rest of the GPU
// for a whole block lifetime. So: the fewest splits whose launch keeps the slots busy, i.e. whose
// blocks fill `resident` (blocks the GPU holds at once) to at least kMinUtilization over whole
// waves, else the count that comes closest (a 61%-full last wave cost a quarter of the bandwidth).
#pragma once

#include "core/dtype.h"  // SERVE8_HD

namespace serve8 {

constexpr double kDecodeMinUtilization = 0.9;

constexpr int plan_decode_splits(int base_blocks, int resident, int max_splits) {
  if (base_blocks <= 0 || resident <= 0) return 1;
  int best = 1;
  double best_util = 0.0;
  for (int k = 1; k <= max_splits; ++k) {
    const long long blocks = static_cast<long long>(base_blocks) * k;
    const long long waves = (blocks + resident - 1) / resident;
    const double util = static_cast<double>(blocks) / static_cast<double>(waves * resident);
    if (util >= kDecodeMinUtilization) return k;
    if (util > best_util + 1e-9) {
      best_util = util;
      best = k;
    }
  }
  return best;
}

// How a sequence of kv_len tokens splits: one split per min_chunk tokens, but at least min_count
// splits as long as each keeps kDecodeMinSplitTokens, at most max_splits (the launch's grid). The
// decode and merge kernels agree through this.
constexpr int kDecodeMinSplitTokens = 64;
SERVE8_HD constexpr int decode_splits_for(int kv_len, int max_splits, int min_chunk, int min_count) {
  int n = (kv_len + min_chunk - 1) / min_chunk;
  const int most = kv_len / kDecodeMinSplitTokens;  // splits of at least kDecodeMinSplitTokens
  if (n < min_count) n = min_count < most ? min_count : most;
  return n < 1 ? 1 : (n < max_splits ? n : max_splits);
}

// With more blocks than SMs unsplit, long streams per block win (1024 tokens); with at most a
// block per SM the launch is latency-bound and 256-token splits, at least 8, win (bench_attention's
// decode grid). A function of the launch shape only, so a CUDA-graph bucket keeps its grid.
struct DecodeSplitRule {
  int min_chunk, min_count;
};
constexpr DecodeSplitRule decode_split_rule(int base_blocks, int sms) {
  return base_blocks <= sms ? DecodeSplitRule{256, 8} : DecodeSplitRule{1024, 1};
}

}  // namespace serve8
