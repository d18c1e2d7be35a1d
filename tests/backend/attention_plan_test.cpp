// The CUDA attention unit's host-side plan (plain C++, so it runs on the CPU).
#include "backend/cuda/attention_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace serve8 {
namespace {

// An H200 with the decode kernel's occupancy there (bf16: 2 blocks an SM; FP8: 4 with one KV head
// a block, 2 with two).
AttentionShape h200(DType kv, int hq, int hkv) {
  AttentionShape s;
  s.num_q_heads = hq;
  s.num_kv_heads = hkv;
  s.head_dim = 128;
  s.kv_dtype = kv;
  s.sms = 132;
  const bool fp8 = kv == DType::kFP8E5M2 || kv == DType::kFP8E4M3;
  s.blocks_per_sm[0] = fp8 ? 4 : 2;
  s.blocks_per_sm[1] = 2;
  return s;
}

TEST(AttentionPlan, DecodeDependsOnTheLaunchShapeOnly) {
  const AttentionShape llama3 = h200(DType::kFP8E5M2, 32, 8);
  const DecodePlan b1 = plan_decode(1, llama3, {});
  EXPECT_EQ(b1.heads_per_block, 1);
  EXPECT_EQ(b1.num_splits, 60);  // 8 blocks x 60 = 480 of 528 slots
  EXPECT_EQ(b1.min_chunk, 256);
  EXPECT_EQ(b1.min_count, 8);
  const DecodePlan b64 = plan_decode(64, llama3, {});
  EXPECT_EQ(b64.heads_per_block, 2);  // 512 (sequence, head) pairs fill two blocks an SM
  EXPECT_EQ(b64.num_splits, 1);
  EXPECT_EQ(b64.min_chunk, 1024);
  EXPECT_EQ(b64.partial_floats(64, llama3), 0u);
  // bf16 rows are 256 bytes: one head a block always.
  EXPECT_EQ(plan_decode(64, h200(DType::kBF16, 32, 8), {}).heads_per_block, 1);
  // Only FP8 pairs heads, even when asked.
  EXPECT_EQ(plan_decode(64, h200(DType::kI8, 32, 8), {}).heads_per_block, 1);
  EXPECT_EQ(plan_decode(64, h200(DType::kI8, 32, 8), AttentionOptions{2, 0}).heads_per_block, 1);
  EXPECT_EQ(plan_decode(64, h200(DType::kI4, 32, 8), AttentionOptions{2, 0}).heads_per_block, 1);
  EXPECT_EQ(plan_decode(64, h200(DType::kBF16, 32, 8), AttentionOptions{2, 0}).heads_per_block, 1);
  const DecodePlan forced = plan_decode(1, llama3, AttentionOptions{2, 16});
  EXPECT_EQ(forced.heads_per_block, 2);
  EXPECT_EQ(forced.min_chunk, 16);
  EXPECT_EQ(forced.min_count, 1);
  EXPECT_EQ(b1.partial_floats(1, llama3), size_t{60} * 32 * 129);
}

TEST(AttentionPlan, PrefillTilesHeaviestFirst) {
  // Sequence 0 decodes; 1 extends 100 tokens over 400 cached; 2 prefills 300 tokens; group 4.
  const std::vector<int32_t> qo{0, 1, 101, 401};
  const std::vector<int32_t> kv{0, 50, 550, 850};
  const int group = 4;
  std::vector<int32_t> seq(static_cast<size_t>(max_prefill_work(401, 3, group)));
  std::vector<int32_t> row0(seq.size());
  const PrefillPlan p = plan_prefill(qo, kv, group, seq.data(), row0.data());
  EXPECT_TRUE(p.has_decode);
  // 400 and 1,200 rows of (token, head): 4 and 10 tiles of 128.
  ASSERT_EQ(p.num_work, 14);
  EXPECT_LE(p.num_work, static_cast<int>(seq.size()));
  // Sequence 1's last tile ends at KV 500, sequence 2's at 300: sequence 1 first, each sequence's
  // tiles from its last.
  EXPECT_EQ(seq[0], 1);
  EXPECT_EQ(row0[0], 384);
  int prev_end = 1 << 30;
  for (int i = 0; i < p.num_work; ++i) {
    const int b = seq[static_cast<size_t>(i)];
    const int q_len = qo[static_cast<size_t>(b) + 1] - qo[static_cast<size_t>(b)];
    const int kv_len = kv[static_cast<size_t>(b) + 1] - kv[static_cast<size_t>(b)];
    const int last = std::min(row0[static_cast<size_t>(i)] + kPrefillTileRows, q_len * group) - 1;
    const int end = kv_len - q_len + last / group + 1;
    EXPECT_LE(end, prev_end) << "item " << i;
    prev_end = end;
  }
  const std::vector<int32_t> decode_only{0, 1, 2};
  const PrefillPlan d = plan_prefill(decode_only, std::vector<int32_t>{0, 9, 30}, group, seq.data(), row0.data());
  EXPECT_EQ(d.num_work, 0);
  EXPECT_TRUE(d.has_decode);
}

TEST(AttentionPlan, WorkBoundCoversEveryBatch) {
  // Every sequence's rows round up to whole tiles: the bound holds for the worst split of tokens.
  for (int group : {1, 2, 8}) {
    for (int seqs : {1, 3, 64}) {
      const int tokens = 1000;
      std::vector<int32_t> qo{0}, kv{0};
      for (int b = 0; b < seqs; ++b) {
        const int q = b + 1 < seqs ? 2 : tokens - 2 * (seqs - 1);
        qo.push_back(qo.back() + q);
        kv.push_back(kv.back() + q);
      }
      std::vector<int32_t> seq(static_cast<size_t>(max_prefill_work(tokens, seqs, group)));
      std::vector<int32_t> row0(seq.size());
      EXPECT_LE(plan_prefill(qo, kv, group, seq.data(), row0.data()).num_work, static_cast<int>(seq.size()));
    }
  }
}

}  // namespace
}  // namespace serve8
