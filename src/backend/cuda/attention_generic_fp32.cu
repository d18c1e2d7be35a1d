// The generic attention kernel instantiated for an fp32 KV pool (fp32 compute; attention_instances.h).
#include "backend/cuda/attention_generic.cuh"

namespace serve8 {

template void launch_generic_typed<DType::kF32>(const AttentionParams&, cudaStream_t);

}  // namespace serve8
