// The skinny FP8 GEMM's TMA kernel for 17-64 e4m3 token rows and 33-64 bf16 ones
// (skinny_gemm_tma.cu); SkinnyGemm dispatches to it where its plan says `tma`.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/skinny_gemm.h"

namespace serve8 {

// Sets the kernel's shared memory; its resident blocks an SM for these tokens.
int prepare_skinny_tma(bool x_bf16);
// False (nothing launched) where the plan is not the TMA kernel's or the matrices cannot be
// described to TMA (K not a multiple of 16, a base not 16-byte aligned).
bool run_skinny_tma(const SkinnyGemmArgs& args, const SkinnyGemmPlan& plan, cudaStream_t stream);

}  // namespace serve8
