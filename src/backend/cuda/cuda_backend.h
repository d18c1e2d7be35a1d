// The CUDA backend: cuBLASLt GEMMs and serve8's own kernels, bf16 compute (or fp32, --dtype float32).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/attention_plan.h"

namespace serve8 {

int cuda_device_count();
// compute: the dtype of weights and activations, bf16 or fp32 (fp32: attention for head dims 8, 16
// and 32 only, on the generic kernel; meant for checking small models against fp32 references).
// options: the attention plan's overrides (tests); serving keeps the defaults. device: the GPU's
// index (-1: the calling thread's current device).
std::unique_ptr<Backend> create_cuda_backend(DType compute = DType::kBF16, AttentionOptions options = {},
                                             int device = -1);
// Whether this build has NCCL (tensor parallelism over GPUs; the library is opened at first use).
bool cuda_has_nccl();

}  // namespace serve8
