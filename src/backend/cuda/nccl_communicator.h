// NCCL communicators: tensor parallelism over the GPUs of one process, one rank (thread and
// CudaBackend) per GPU, made together by ncclCommInitAll. Each rank's collectives run on its
// backend's stream (Communicator::bind), so they order with the model's ops and CUDA graphs
// capture them. Why one process: DESIGN.md, "Tensor parallelism".
#pragma once

#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace serve8 {

// Ranks 0..n-1 on GPUs 0..n-1 (CudaBackend::check_communicators has checked there are n).
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int n);

}  // namespace serve8
