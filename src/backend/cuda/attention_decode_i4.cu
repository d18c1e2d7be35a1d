// Decode attention instantiated for the int4 KV pool (attention_instances.h).
#include "backend/cuda/attention_decode_stream_launch.cuh"

namespace serve8 {

template void launch_decode_stream_typed<DType::kI4>(const AttentionParams&, cudaStream_t);
template int decode_stream_blocks_per_sm<DType::kI4>(int, int);

}  // namespace serve8
