// The CPU backend: the fp32 reference implementation of every op (OpenBLAS GEMM, OpenMP threads).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace serve8 {

std::unique_ptr<Backend> create_cpu_backend();

}  // namespace serve8
