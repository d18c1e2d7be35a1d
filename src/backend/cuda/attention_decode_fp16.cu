// Decode attention instantiated for the fp16 KV pool (attention_instances.h).
#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_decode_mma.cuh"

namespace serve8 {

template void launch_decode_typed<DType::kF16>(const AttentionParams&, cudaStream_t);
template void launch_decode_mma_typed<DType::kF16>(const AttentionParams&, cudaStream_t);

}  // namespace serve8
