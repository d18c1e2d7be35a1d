// The logit edits of the sampler's callers: penalties and biases (Backend::edit_logits) and
// grammar masks (Backend::mask_logits), in place on the fp32 logits before sample().
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampler.h"

namespace serve8 {

namespace {

// One thread per edit; a (row, token) appears once, so edits never race. Rounded multiply, then
// add (no fused multiply-add), as the CPU backend computes it.
__global__ void edit_logits_kernel(float* logits, int64_t vocab, const LogitEdit* edits, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const LogitEdit e = edits[i];
  float* x = logits + e.row * vocab + e.token;
  *x = __fadd_rn(__fmul_rn(*x, *x > 0.0f ? e.mul_pos : e.mul_neg), e.add);
}

}  // namespace

void CudaSampler::edit(float* logits, int64_t vocab, std::span<const LogitEdit> edits) {
  if (edits.empty()) return;
  reserve(edits_, edits_bytes_, edits.size_bytes());
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(edits_, edits.data(), edits.size_bytes(), cudaMemcpyHostToDevice, stream_));
  const int n = static_cast<int>(edits.size());
  edit_logits_kernel<<<(n + 255) / 256, 256, 0, stream_>>>(logits, vocab, static_cast<const LogitEdit*>(edits_), n);
  SERVE8_CUDA_CHECK_LAUNCH("edit_logits_kernel");
}

// Grid (row, chunk of tokens): a thread per token clears the logit its row's mask forbids.
__global__ void mask_logits_kernel(float* logits, int64_t vocab, const int32_t* rows, const uint32_t* allowed,
                                   int64_t words) {
  const int64_t t = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (t >= vocab) return;
  const uint32_t w = allowed[blockIdx.x * words + t / 32];
  if (!((w >> (t % 32)) & 1u)) logits[rows[blockIdx.x] * vocab + t] = -INFINITY;
}

void CudaSampler::mask(float* logits, int64_t vocab, std::span<const int32_t> rows, std::span<const int32_t> allowed) {
  if (rows.empty()) return;
  reserve(masks_, masks_bytes_, rows.size_bytes() + allowed.size_bytes());
  auto* d_rows = static_cast<int32_t*>(masks_);
  auto* d_allowed = reinterpret_cast<uint32_t*>(d_rows + rows.size());
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(d_rows, rows.data(), rows.size_bytes(), cudaMemcpyHostToDevice, stream_));
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(d_allowed, allowed.data(), allowed.size_bytes(), cudaMemcpyHostToDevice, stream_));
  const dim3 grid(static_cast<unsigned>(rows.size()), static_cast<unsigned>((vocab + 255) / 256));
  mask_logits_kernel<<<grid, 256, 0, stream_>>>(logits, vocab, d_rows, d_allowed, (vocab + 31) / 32);
  SERVE8_CUDA_CHECK_LAUNCH("mask_logits_kernel");
}

}  // namespace serve8
