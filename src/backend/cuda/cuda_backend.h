// The CUDA backend: cuBLASLt GEMMs and serve8's own kernels, bf16 compute.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace serve8 {

int cuda_device_count();
std::unique_ptr<Backend> create_cuda_backend();

}  // namespace serve8
