// Decode attention instantiated for the fp16 KV pool (attention_instances.h).
#include "backend/cuda/attention_decode_stream_launch.cuh"

namespace serve8 {

template void launch_decode_stream_typed<DType::kF16>(const AttentionParams&, cudaStream_t);
template int decode_stream_blocks_per_sm<DType::kF16>(int, int);

}  // namespace serve8
