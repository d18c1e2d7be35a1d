// The skinny GEMM's TMA kernel for 17-64 token rows (skinny_gemm_tma.cu): e4m3 weights with 17-64
// e4m3 rows or 33-64 bf16 ones, bf16 weights with 17-64 bf16 rows; SkinnyGemm dispatches to it
// where its plan says `tma`.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/skinny_gemm.h"

namespace serve8 {

// Sets the kernel's shared memory; its resident blocks an SM for these tokens and weights (0: none
// built).
int prepare_skinny_tma(bool x_bf16, bool w_bf16);
// False (nothing launched) where the plan is not the TMA kernel's or the matrices cannot be
// described to TMA (K not a multiple of 16, a base not 16-byte aligned).
bool run_skinny_tma(const SkinnyGemmArgs& args, const SkinnyGemmPlan& plan, cudaStream_t stream);

}  // namespace serve8
