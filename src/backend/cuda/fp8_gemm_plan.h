// The skinny FP8 GEMM's host plan: for out[M, N] = xq[M, K] · wq[N, K]^T with few rows M (decode
// batches), which kernel variant runs and how K is split so every SM streams weights. Pure
// arithmetic, tested on the CPU; fp8_gemm.cu runs it.
//
// Which FP8 GEMM takes which M (bench_gemm, H200, bench/README.md): the CUDA-core GEMV at M = 1,
// this kernel at 2-4 (a few percent ahead of cuBLASLt's FP8 GEMM there), cuBLASLt beyond: Hopper
// runs mma.sync on e4m3 through fp16 conversions, so at 8 rows it only ties and from 16 it loses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace serve8 {

constexpr int kFp8GemvMaxRows = 1;
constexpr int kFp8SkinnyMaxRows = 4;
constexpr int kFp8SkinnyRowsPerBlock = 64;  // weight rows per thread block (4 warps x 16)
constexpr int kFp8SkinnyMaxSplits = 16;
// Split-K partial sums ([splits, M, N] fp32) live in a workspace of this many floats (4 MiB).
constexpr size_t kFp8SkinnyWorkspaceFloats = size_t{1} << 20;
// Row tiles a GEMM may have (one arrival counter each): N up to 64 x 4096.
constexpr int kFp8SkinnyMaxRowTiles = 4096;

struct Fp8SkinnyPlan {
  bool ok = false;      // false: the shape is not the skinny kernel's (M, K or N out of range)
  int lane_bytes = 0;   // K bytes a lane loads per row per step: 32 (K % 128 == 0) or 16 (K % 64 == 0)
  int row_tiles = 0;    // ceil(N / 64)
  int splits = 1;       // K slices; > 1: partial sums in the workspace, the last slice's block adds them
};

// sms: the device's multiprocessors. The split is chosen so that about four blocks per SM stream
// weights, each slice at least four K steps, and the partials fit the workspace.
Fp8SkinnyPlan plan_fp8_skinny(int64_t m, int64_t n, int64_t k, int sms);

}  // namespace serve8
