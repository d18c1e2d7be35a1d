// The GEMM for small decode batches on Hopper's tensor cores: the weights are the wgmma's
// 64-row operand and the tokens its narrow one, so each weight byte is read once; skinny_gemm_plan.h
// cuts the work, and a tile's last split block adds the partials. e4m3 tokens (up to 16 rows)
// multiply on the FP8 tensor cores, 17-64 rows in the TMA kernel (skinny_gemm_tma.h); bf16 tokens
// (weight-only FP8, up to 64) on the bf16 ones, each thread widening its share of the weights
// (exactly: e4m3 fits bf16) into wgmma's register operand. e4m3 weights throughout, except bf16
// weights with bf16 tokens (up to 16 rows): the same kernel, both operands in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/skinny_gemm_plan.h"

namespace serve8 {

// out[m, n] = (x[m] · w[n]) * x_scale[m] * w_scale[n] (+ bias[n]); w e4m3 rows of k bytes, x e4m3
// rows of k bytes or, with x_bf16, bf16 rows of k elements and no x_scale (k a multiple of 16, x
// and w 16-byte aligned); out bf16 or fp32. With w_bf16 (and x_bf16), w is bf16 rows of k elements
// and w_scale may be null (1).
struct SkinnyGemmArgs {
  const void* x = nullptr;
  bool x_bf16 = false;
  bool w_bf16 = false;
  const uint8_t* w = nullptr;
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  const void* bias = nullptr;  // optional
  bool bias_f32 = false;       // else bf16
  void* out = nullptr;
  bool out_f32 = false;  // else bf16
  int64_t m = 0, n = 0, k = 0;
};

class SkinnyGemm {
 public:
  // Allocates the partial sums and the per-tile counters once; launches allocate nothing.
  explicit SkinnyGemm(int sms, size_t workspace_bytes = size_t{32} << 20);
  ~SkinnyGemm();
  SkinnyGemm(const SkinnyGemm&) = delete;
  SkinnyGemm& operator=(const SkinnyGemm&) = delete;

  // token_tile 0 if the shape is not for this kernel.
  SkinnyGemmPlan plan(int64_t m, int64_t n, int64_t k, bool x_bf16 = false, bool w_bf16 = false) const;
  size_t workspace_bytes() const { return workspace_bytes_; }

  // False (nothing launched) when the plan is refused or does not fit the workspace; a plan of
  // the caller's is for bench_gemm's split sweeps.
  bool run(const SkinnyGemmArgs& args, cudaStream_t stream);
  bool run(const SkinnyGemmArgs& args, const SkinnyGemmPlan& plan, cudaStream_t stream);

 private:
  int sms_ = 0;
  // [e4m3 tokens, bf16 tokens, bf16 weights][token tile]; 0 where not built
  int blocks_per_sm_[3][kSkinnyTokenTileCount] = {};
  int tma_blocks_per_sm_[2] = {};  // the TMA kernel's, [x_bf16]
  size_t workspace_bytes_ = 0;
  float* partials_ = nullptr;
  unsigned* counters_ = nullptr;
};

}  // namespace serve8
