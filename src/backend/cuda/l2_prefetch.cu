// Weights brought into L2 ahead of their GEMM (CudaBackend::prefetch_weights): bulk L2 prefetches
// of 64 KB, issued by one block that exits without waiting for them.
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 64 * 1024;

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const uint8_t* p, int64_t bytes) {
  for (int64_t off = int64_t{threadIdx.x} * kChunk; off < bytes; off += kThreads * kChunk) {
    const uint32_t n = static_cast<uint32_t>(bytes - off < kChunk ? bytes - off : kChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p + off), "r"(n) : "memory");
  }
}

}  // namespace

void launch_l2_prefetch(const void* p, int64_t bytes, cudaStream_t stream) {
  // The instruction takes 16-byte-aligned addresses and sizes.
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = (a + 15) & ~uintptr_t{15};
  bytes = (bytes - static_cast<int64_t>(b - a)) & ~int64_t{15};
  if (bytes <= 0) return;
  l2_prefetch_kernel<<<1, kThreads, 0, stream>>>(reinterpret_cast<const uint8_t*>(b), bytes);
}

}  // namespace serve8
