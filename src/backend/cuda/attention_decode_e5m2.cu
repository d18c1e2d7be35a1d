// Decode attention instantiated for the e5m2 KV pool (attention_instances.h).
#include "backend/cuda/attention_decode_stream_launch.cuh"

namespace serve8 {

template void launch_decode_stream_typed<DType::kFP8E5M2>(const AttentionParams&, cudaStream_t);
template int decode_stream_blocks_per_sm<DType::kFP8E5M2>(int, int);

}  // namespace serve8
