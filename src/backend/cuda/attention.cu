// Attention dispatch over the KV storage dtype.
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_instances.h"
#include "backend/cuda/cuda_check.h"

namespace serve8 {

bool attention_fast_path(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= kAttentionMaxGroup;
}

bool attention_generic_path(int head_dim, int group) {
  return (head_dim == 8 || head_dim == 16 || head_dim == 32) && group >= 1;
}

bool attention_fp32_path(int head_dim, int group) {
  return (attention_generic_path(head_dim, group) || head_dim == 64 || head_dim == 128) && group >= 1;
}

void launch_attention_decode(const AttentionParams& p, DType kv_dtype, cudaStream_t stream) {
  switch (kv_dtype) {
    case DType::kBF16:
      return launch_decode_stream_typed<DType::kBF16>(p, stream);
    case DType::kF16:
      return launch_decode_stream_typed<DType::kF16>(p, stream);
    case DType::kFP8E5M2:
      return launch_decode_stream_typed<DType::kFP8E5M2>(p, stream);
    case DType::kFP8E4M3:
      return launch_decode_stream_typed<DType::kFP8E4M3>(p, stream);
    case DType::kI8:
      return launch_decode_stream_typed<DType::kI8>(p, stream);
    case DType::kI4:
      return launch_decode_stream_typed<DType::kI4>(p, stream);
    case DType::kF32:
    case DType::kI32:
      return;  // refused by the backend's entry point
  }
}

int decode_blocks_per_sm(DType kv_dtype, int head_dim, int heads_per_block) {
  switch (kv_dtype) {
    case DType::kBF16:
      return decode_stream_blocks_per_sm<DType::kBF16>(head_dim, heads_per_block);
    case DType::kF16:
      return decode_stream_blocks_per_sm<DType::kF16>(head_dim, heads_per_block);
    case DType::kFP8E5M2:
      return decode_stream_blocks_per_sm<DType::kFP8E5M2>(head_dim, heads_per_block);
    case DType::kFP8E4M3:
      return decode_stream_blocks_per_sm<DType::kFP8E4M3>(head_dim, heads_per_block);
    case DType::kI8:
      return decode_stream_blocks_per_sm<DType::kI8>(head_dim, heads_per_block);
    case DType::kI4:
      return decode_stream_blocks_per_sm<DType::kI4>(head_dim, heads_per_block);
    case DType::kF32:
    case DType::kI32:
      break;
  }
  return 0;
}

void launch_attention_prefill(const AttentionParams& p, DType kv_dtype, cudaStream_t stream) {
  if (p.num_work == 0) return;
  switch (kv_dtype) {
    case DType::kBF16:
      return launch_prefill_typed<DType::kBF16>(p, stream);
    case DType::kF16:
      return launch_prefill_typed<DType::kF16>(p, stream);
    case DType::kFP8E5M2:
      return launch_prefill_typed<DType::kFP8E5M2>(p, stream);
    case DType::kFP8E4M3:
      return launch_prefill_typed<DType::kFP8E4M3>(p, stream);
    case DType::kI8:
      return launch_prefill_typed<DType::kI8>(p, stream);
    case DType::kI4:
      return launch_prefill_typed<DType::kI4>(p, stream);
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
    case DType::kI8:
    case DType::kI4:
      return;
  }
}

}  // namespace serve8
