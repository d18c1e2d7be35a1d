// Error checks for CUDA runtime and cuBLASLt calls: a failing call throws serve8::Error naming the
// call, where it was made and the library's own error string. Kept free of fmt so that .cu files
// include it without pulling host-only headers through nvcc.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace serve8 {

[[noreturn]] void cuda_fail(const char* call, cudaError_t err, const char* file, int line);
[[noreturn]] void cublas_fail(const char* call, cublasStatus_t st, const char* file, int line);

}  // namespace serve8

#define SERVE8_CUDA_CHECK(call)                                                                  \
  do {                                                                                           \
    const cudaError_t serve8_err_ = (call);                                                      \
    if (serve8_err_ != cudaSuccess) ::serve8::cuda_fail(#call, serve8_err_, __FILE__, __LINE__); \
  } while (0)

#define SERVE8_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                     \
    const cublasStatus_t serve8_st_ = (call);                                                              \
    if (serve8_st_ != CUBLAS_STATUS_SUCCESS) ::serve8::cublas_fail(#call, serve8_st_, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, a fault inside the kernel at the next
// synchronizing call.
#define SERVE8_CUDA_CHECK_LAUNCH(name)                                                          \
  do {                                                                                          \
    const cudaError_t serve8_err_ = cudaGetLastError();                                         \
    if (serve8_err_ != cudaSuccess) ::serve8::cuda_fail(name, serve8_err_, __FILE__, __LINE__); \
  } while (0)
