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
  EXPECT_EQ(decode_min_chunk(1 * 8, kSms), 128);         // Llama-3 heads, B=1: 8 blocks unsplit
  EXPECT_EQ(decode_min_chunk(1 * 40, kSms), 128);        // Llama-2-13B heads, B=1
  EXPECT_EQ(decode_min_chunk(16 * 8, kSms), 128);        // Llama-3 heads, B=16: 128 blocks
  EXPECT_EQ(decode_min_chunk(16 * 40 / 2, kSms), 1024);  // Llama-2-13B heads, B=16, two heads a block: 320
  EXPECT_EQ(decode_min_chunk(64 * 8 / 2, kSms), 1024);   // Llama-3 heads, B=64, FP8
  EXPECT_EQ(decode_min_chunk(kSms, kSms), 128);
  EXPECT_EQ(decode_min_chunk(kSms + 1, kSms), 1024);
}

}  // namespace
}  // namespace serve8
