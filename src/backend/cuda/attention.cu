// Attention dispatch over the KV storage dtype, and the log-sum-exp merge of decode splits.
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_instances.h"
#include "backend/cuda/cuda_check.h"

namespace serve8 {
namespace {

// One block per (sequence, query head). Sequences that did not split were written by the decode kernel.
__global__ void attention_merge_kernel(const AttentionParams p) {
  __shared__ float s_w[kDecodeMaxSplits + 1];
  const int b = blockIdx.x;
  if (p.qo_indptr[b + 1] - p.qo_indptr[b] != 1) return;
  const int kv_len = p.kv_indptr[b + 1] - p.kv_indptr[b];
  const int n = decode_splits_for(kv_len, p.num_splits, p.split_min_chunk, p.split_min_count);
  if (n > 1) merge_decode_splits(p, b, blockIdx.y, n, s_w);
}

template <DType kKv>
void launch_decode_kernel(const AttentionParams& p, DecodeKernel kernel, cudaStream_t stream) {
  switch (kernel) {
    case DecodeKernel::kStream:
      return launch_decode_stream_typed<kKv>(p, stream);
    case DecodeKernel::kTensorCores:
      return launch_decode_mma_typed<kKv>(p, stream);
    case DecodeKernel::kCudaCores:
      return launch_decode_typed<kKv>(p, stream);
  }
}

}  // namespace

int decode_heads_per_block(DType kv_dtype, DecodeKernel kernel, int num_seqs, int num_kv_heads, int sms, int forced) {
  const bool fp8 = kv_dtype == DType::kFP8E5M2 || kv_dtype == DType::kFP8E4M3;
  if (kernel != DecodeKernel::kStream || !fp8) return 1;
  if (forced > 0) return forced;
  return int64_t{num_seqs} * num_kv_heads >= 2 * int64_t{sms} ? 2 : 1;
}

bool attention_fast_path(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= kAttentionMaxGroup;
}

bool attention_generic_path(int head_dim, int group) {
  return (head_dim == 8 || head_dim == 16 || head_dim == 32) && group >= 1;
}

bool attention_fp32_path(int head_dim, int group) {
  return (attention_generic_path(head_dim, group) || head_dim == 64 || head_dim == 128) && group >= 1;
}

void launch_attention_decode(const AttentionParams& p, DType kv_dtype, DecodeKernel kernel, cudaStream_t stream) {
  switch (kv_dtype) {
    case DType::kBF16:
      launch_decode_kernel<DType::kBF16>(p, kernel, stream);
      break;
    case DType::kF16:
      launch_decode_kernel<DType::kF16>(p, kernel, stream);
      break;
    case DType::kFP8E5M2:
      launch_decode_kernel<DType::kFP8E5M2>(p, kernel, stream);
      break;
    case DType::kFP8E4M3:
      launch_decode_kernel<DType::kFP8E4M3>(p, kernel, stream);
      break;
    case DType::kF32:
    case DType::kI32:
      return;  // rejected by the backend's entry point
  }
  if (p.num_splits > 1 && p.split_counters == nullptr) {  // else the decode kernel merged (fused)
    attention_merge_kernel<<<dim3(p.num_seqs, p.num_q_heads), 128, 0, stream>>>(p);
    SERVE8_CUDA_CHECK_LAUNCH("attention_merge_kernel");
  }
}

int decode_blocks_per_sm(DType kv_dtype, int head_dim, DecodeKernel kernel, int heads_per_block) {
  if (kernel != DecodeKernel::kStream) return 0;
  switch (kv_dtype) {
    case DType::kBF16:
      return decode_stream_blocks_per_sm<DType::kBF16>(head_dim, heads_per_block);
    case DType::kF16:
      return decode_stream_blocks_per_sm<DType::kF16>(head_dim, heads_per_block);
    case DType::kFP8E5M2:
      return decode_stream_blocks_per_sm<DType::kFP8E5M2>(head_dim, heads_per_block);
    case DType::kFP8E4M3:
      return decode_stream_blocks_per_sm<DType::kFP8E4M3>(head_dim, heads_per_block);
    case DType::kF32:
    case DType::kI32:
      break;
  }
  return 0;
}

void launch_attention_prefill(const AttentionParams& p, DType kv_dtype, PrefillKernel kernel, cudaStream_t stream) {
  const bool pipelined = kernel == PrefillKernel::kPipelined;
  if (p.num_work == 0) return;
  switch (kv_dtype) {
    case DType::kBF16:
      return launch_prefill_typed<DType::kBF16>(p, pipelined, stream);
    case DType::kF16:
      return launch_prefill_typed<DType::kF16>(p, pipelined, stream);
    case DType::kFP8E5M2:
      return launch_prefill_typed<DType::kFP8E5M2>(p, pipelined, stream);
    case DType::kFP8E4M3:
      return launch_prefill_typed<DType::kFP8E4M3>(p, pipelined, stream);
    case DType::kF32:
    case DType::kI32:
      return;
  }
}

void launch_attention_generic(const AttentionParams& p, DType kv_dtype, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  switch (kv_dtype) {
    case DType::kBF16:
      return launch_generic_typed<DType::kBF16>(p, stream);
    case DType::kF16:
      return launch_generic_typed<DType::kF16>(p, stream);
    case DType::kFP8E5M2:
      return launch_generic_typed<DType::kFP8E5M2>(p, stream);
    case DType::kFP8E4M3:
      return launch_generic_typed<DType::kFP8E4M3>(p, stream);
    case DType::kF32:
      return launch_generic_typed<DType::kF32>(p, stream);
    case DType::kI32:
      return;
  }
}

}  // namespace serve8
