// The split-KV planner of the CUDA decode kernels (pure arithmetic, so it runs on the CPU).
#include "backend/cuda/decode_splits.h"

#include <gtest/gtest.h>

namespace serve8 {
namespace {

// Resident FP8 decode blocks of an H200 (4 per SM, 132 SMs) and bf16 ones (2 per SM).
constexpr int kFp8Slots = 528, kBf16Slots = 264;

TEST(DecodeSplits, OneWaveBatchesKeepOneSplit) {
  EXPECT_EQ(plan_decode_splits(64 * 8, kFp8Slots, 128), 1);   // Llama-3 heads, B=64: 97% of one wave
  EXPECT_EQ(plan_decode_splits(256 * 8, kFp8Slots, 128), 1);  // 3.9 waves, 97%
  EXPECT_EQ(plan_decode_splits(64 * 40, kFp8Slots, 128), 1);  // Llama-2-13B heads, B=64: 4.85 waves, 97%
  EXPECT_EQ(plan_decode_splits(64 * 8, kBf16Slots, 128), 1);  // 1.94 waves, 97%
}

TEST(DecodeSplits, SmallBatchesSplitUntilTheWaveIsFull) {
  EXPECT_EQ(plan_decode_splits(16 * 8, kFp8Slots, 128), 4);    // 512 of 528 slots
  EXPECT_EQ(plan_decode_splits(16 * 40, kFp8Slots, 128), 3);   // 1920 of 2112: 91% (one split: 61%)
  EXPECT_EQ(plan_decode_splits(16 * 40, kBf16Slots, 128), 2);  // 1280 of 1320
  EXPECT_EQ(plan_decode_splits(1 * 8, kFp8Slots, 128), 60);    // 480 of 528: the first past 90%
}

TEST(DecodeSplits, CapsAndDegenerateInputs) {
  EXPECT_EQ(plan_decode_splits(1, kFp8Slots, 128), 128);  // 128 of 528 is the best reachable
  EXPECT_EQ(plan_decode_splits(7, 100, 3), 3);            // best within the cap: 21 of 100
  EXPECT_EQ(plan_decode_splits(0, kFp8Slots, 128), 1);
  EXPECT_EQ(plan_decode_splits(8, 0, 128), 1);
  static_assert(plan_decode_splits(64 * 8, kFp8Slots, 128) == 1, "usable at compile time");
}

TEST(DecodeSplits, ShortSplitsOnlyWhenTheLaunchIsSmall) {
  constexpr int kSms = 132;
  const auto small = [](DecodeSplitRule r) { return r.min_chunk == 256 && r.min_count == 8; };
  const auto large = [](DecodeSplitRule r) { return r.min_chunk == 1024 && r.min_count == 1; };
  EXPECT_TRUE(small(decode_split_rule(1 * 8, kSms)));        // Llama-3 heads, B=1: 8 blocks unsplit
  EXPECT_TRUE(small(decode_split_rule(1 * 40, kSms)));       // Llama-2-13B heads, B=1
  EXPECT_TRUE(small(decode_split_rule(16 * 8, kSms)));       // Llama-3 heads, B=16: 128 blocks
  EXPECT_TRUE(large(decode_split_rule(16 * 40 / 2, kSms)));  // Llama-2-13B heads, B=16, two heads a block
  EXPECT_TRUE(large(decode_split_rule(64 * 8 / 2, kSms)));   // Llama-3 heads, B=64, FP8
  EXPECT_TRUE(small(decode_split_rule(kSms, kSms)));
  EXPECT_TRUE(large(decode_split_rule(kSms + 1, kSms)));
}

TEST(DecodeSplits, SplitsOfASequence) {
  // Small launches (256 tokens a split, at least 8 of >= 64 tokens), Llama-3 heads at B=1: 60 splits a launch.
  EXPECT_EQ(decode_splits_for(512, 60, 256, 8), 8);  // 64 tokens each
  EXPECT_EQ(decode_splits_for(2048, 60, 256, 8), 8);
  EXPECT_EQ(decode_splits_for(4096, 60, 256, 8), 16);
  EXPECT_EQ(decode_splits_for(8192, 60, 256, 8), 32);
  EXPECT_EQ(decode_splits_for(32768, 60, 256, 8), 60);  // the launch's cap
  EXPECT_EQ(decode_splits_for(300, 60, 256, 8), 4);     // 75 tokens each: none under 64
  EXPECT_EQ(decode_splits_for(127, 60, 256, 8), 1);
  EXPECT_EQ(decode_splits_for(128, 60, 256, 8), 2);
  EXPECT_EQ(decode_splits_for(1, 60, 256, 8), 1);
  EXPECT_EQ(decode_splits_for(0, 60, 256, 8), 1);
  EXPECT_EQ(decode_splits_for(4096, 4, 256, 8), 4);  // Llama-3 heads at B=16: 4 splits a launch
  // Large launches: one split per 1,024 tokens.
  EXPECT_EQ(decode_splits_for(512, 3, 1024, 1), 1);
  EXPECT_EQ(decode_splits_for(2048, 3, 1024, 1), 2);
  EXPECT_EQ(decode_splits_for(1 << 20, 3, 1024, 1), 3);
  EXPECT_EQ(decode_splits_for(2048, 1, 1024, 1), 1);
}

}  // namespace
}  // namespace serve8
