// The CUDA backend: cuBLASLt GEMMs and serve8's own kernels, bf16 compute (or fp32, --dtype float32).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/attention_plan.h"

namespace serve8 {

int cuda_device_count();
// compute: the dtype of weights and activations, bf16 or fp32 (fp32: attention for head dims 8, 16
// and 32 only, on the generic kernel; meant for checking small models against fp32 references).
// options: the attention plan's overrides (tests); serving keeps the defaults.
std::unique_ptr<Backend> create_cuda_backend(DType compute = DType::kBF16, AttentionOptions options = {});

}  // namespace serve8
