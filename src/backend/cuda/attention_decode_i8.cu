// Decode attention instantiated for the int8 KV pool (attention_instances.h).
#include "backend/cuda/attention_decode_stream_launch.cuh"

namespace serve8 {

template void launch_decode_stream_typed<DType::kI8>(const AttentionParams&, cudaStream_t);
template int decode_stream_blocks_per_sm<DType::kI8>(int, int);

}  // namespace serve8
