#include "backend/cuda/cuda_check.h"

#include "backend/cuda/cublaslt_api.h"
#include "core/error.h"

namespace serve8 {

void cuda_fail(const char* call, cudaError_t err, const char* file, int line) {
  fail("CUDA error at {}:{}: {} failed: {} ({})", file, line, call, cudaGetErrorString(err), cudaGetErrorName(err));
}

void cublas_fail(const char* call, cublasStatus_t st, const char* file, int line) {
  fail("cuBLASLt error at {}:{}: {} failed: {} ({})", file, line, call, cublaslt().GetStatusString(st),
       cublaslt().GetStatusName(st));
}

}  // namespace serve8
