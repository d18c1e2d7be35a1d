// The decode stream kernel's copies and its per-warp layout of K/V steps in shared memory
// (attention_decode_stream.cuh says how the kernel uses them).
#pragma once

#include <cstdint>

#include "backend/kv_layout.h"
#include "core/dtype.h"

namespace serve8 {

__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem_addr, const void* gmem, bool valid) {
  // src-size 0 copies nothing and zero-fills: rows past the end of the sequence read no memory.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
template <int kBytes>
__device__ __forceinline__ void cp_async_small_zfill(uint32_t smem_addr, const void* gmem, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr), "l"(gmem), "n"(kBytes),
               "r"(valid ? kBytes : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

template <DType kKv, int kD, int kHeadsPerBlock>
struct DecodeStream {
  // kFp8: one byte a value (FP8 and int8); int4 packs two.
  static constexpr bool kI4 = kKv == DType::kI4;
  static constexpr bool kI8 = kKv == DType::kI8;
  static constexpr bool kRowParams = kI4 || kI8;  // a scale (and minimum) per row, staged beside it
  static constexpr bool kFp8 = kKv == DType::kFP8E5M2 || kKv == DType::kFP8E4M3 || kI8;
  static constexpr int kElemBytes = kFp8 || kI4 ? 1 : 2;
  static constexpr int kRowBytes = kI4 ? kD / 2 : kD * kElemBytes;  // one K (or V) row of one KV head
  static constexpr int kChunks = kRowBytes / 16;                    // 16-byte chunks per row: 2 to 16
  static constexpr int kValsPerChunk = kI4 ? 32 : 16 / kElemBytes;
  static constexpr int kSwizzle = (kChunks < 8 ? kChunks : 8) - 1;
  // Tokens per warp step: kSub tiles of 16, the k extent of one P·V MMA. int4's 16-token tile
  // moves half FP8's bytes; two a step share one softmax update, rescale and set of copies.
  static constexpr int kSub = kI4 ? 2 : 1;
  static constexpr int kStep = 16 * kSub;
  static constexpr int kTileBytes = kStep * kRowBytes;
  // Per row pair K's parameters, then V's (fp16): int8 a scale each, int4 a scale and a minimum.
  static constexpr int kParamPairBytes = 2 * kv_row_param_bytes(kKv);
  static constexpr int kParamBytes = kRowParams ? kStep * kParamPairBytes : 0;
  static constexpr int kStageBytes = 2 * kTileBytes + kParamBytes;
  // Bytes in flight: 4 blocks of 4 warps per SM with 2 FP8 steps ahead each, or 2 blocks with 2
  // bf16 steps ahead, keep 128 KB of loads outstanding per SM (about 30 KB cover the latency);
  // int4 keeps one 32-token step (4.3 KB) ahead a warp, 70 KB an SM.
  static constexpr int kStages = kI4 ? 2 : 3;
  static constexpr int kWarps = 4;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  // KV heads per block, 4 warps each (decode_heads_per_block picks 2 for FP8 on large grids).
  static constexpr int kHeads = kHeadsPerBlock;
  static constexpr int kThreads = 128 * kHeads;
  static constexpr int kSmemBytes = kHeads * kWarps * kWarpBytes;
  static constexpr int kMinBlocks = (kWarps * kWarpBytes <= 56 * 1024 ? 4 : 2) / kHeads;
  static constexpr int kRowsPerPass = 32 / kChunks;  // rows one copy instruction of the warp covers
  static constexpr int kPasses = kStep / kRowsPerPass;
  static constexpr int kKChunks = kChunks / 4;       // K chunks a thread reads per row
  static constexpr int kVWords = kRowBytes / 8 / 4;  // V words a thread reads per row
  static_assert(kI4 || (kKChunks >= 1 && kVWords >= 2), "head dims 64 and 128");
  // int4: thread t4 reads the contiguous kD / 32 words of a K row from byte t4 * kD / 8 (element
  // t4 * kD / 4), and thread gid the kD / 16 bytes of a V row from byte gid * kD / 16.
  static constexpr int kI4KWords = kD / 32;
  static constexpr int kI4VBytes = kD / 16;

  __device__ static int swizzle(int row, int chunk) { return chunk ^ (row & kSwizzle); }
  // The i-th K chunk of lane column t4: chunks {2 t4, 2 t4 + 1} (+8) put the two rows a quarter
  // warp reads on opposite chunk parities, hence on disjoint banks after the swizzle.
  __device__ static int k_chunk(int t4, int i) { return kChunks == 4 ? t4 : (i / 2) * 8 + 2 * t4 + (i % 2); }
  // The d of the thread's v-th K value (q is loaded in this order).
  __device__ static int k_dim(int t4, int v) {
    return k_chunk(t4, v / kValsPerChunk) * kValsPerChunk + v % kValsPerChunk;
  }
  // The d of value j of the V run of lane row n (gid): the rows of the O^T tiles, un-permuted at the end.
  __device__ static int v_dim(int j, int n) {
    if constexpr (kI4) {
      return n * (kD / 8) + j;
    } else if constexpr (kChunks == 4) {
      return n * 8 + j;  // half a chunk each
    } else {
      return (n + 8 * (j / kValsPerChunk)) * kValsPerChunk + j % kValsPerChunk;
    }
  }
  // Byte offset, within a row, of the thread's V bytes for n-tiles [w * 4 / kElemBytes, ...).
  __device__ static int v_byte(int n, int word) {
    if constexpr (kChunks == 4) {
      return (n / 2) * 16 + (n % 2) * 8 + word * 4;  // before the swizzle of the chunk
    } else {
      return (n + 8 * (word / 4)) * 16 + (word % 4) * 4;
    }
  }
};

}  // namespace serve8
