// The explicit instantiations of the attention launchers, one file per (kernel family, KV dtype)
// so that they compile in parallel: attention_{decode,prefill}_<dtype>.cu.
#pragma once

#include "backend/cuda/attention.h"

namespace serve8 {

template <DType kKv>
void launch_decode_stream_typed(const AttentionParams& p, cudaStream_t stream);
template <DType kKv>
int decode_stream_blocks_per_sm(int head_dim, int heads_per_block);
template <DType kKv>
void launch_prefill_typed(const AttentionParams& p, cudaStream_t stream);
template <DType kKv>
void launch_generic_typed(const AttentionParams& p, cudaStream_t stream);

#define SERVE8_EXTERN_ATTENTION(KV)                                                          \
  extern template void launch_decode_stream_typed<KV>(const AttentionParams&, cudaStream_t); \
  extern template int decode_stream_blocks_per_sm<KV>(int, int);                             \
  extern template void launch_prefill_typed<KV>(const AttentionParams&, cudaStream_t);       \
  extern template void launch_generic_typed<KV>(const AttentionParams&, cudaStream_t);
SERVE8_EXTERN_ATTENTION(DType::kBF16)
SERVE8_EXTERN_ATTENTION(DType::kF16)
SERVE8_EXTERN_ATTENTION(DType::kFP8E5M2)
SERVE8_EXTERN_ATTENTION(DType::kFP8E4M3)
#undef SERVE8_EXTERN_ATTENTION
// int8 and int4 pools: decode and prefill only (attention_{decode,prefill}_i{8,4}.cu).
extern template void launch_decode_stream_typed<DType::kI8>(const AttentionParams&, cudaStream_t);
extern template int decode_stream_blocks_per_sm<DType::kI8>(int, int);
extern template void launch_prefill_typed<DType::kI8>(const AttentionParams&, cudaStream_t);
extern template void launch_decode_stream_typed<DType::kI4>(const AttentionParams&, cudaStream_t);
extern template int decode_stream_blocks_per_sm<DType::kI4>(int, int);
extern template void launch_prefill_typed<DType::kI4>(const AttentionParams&, cudaStream_t);
// An fp32 pool (fp32 compute) has the generic kernel only: attention_generic_fp32.cu.
extern template void launch_generic_typed<DType::kF32>(const AttentionParams&, cudaStream_t);

}  // namespace serve8
