// Prefill and generic attention instantiated for the e4m3 KV pool (attention_instances.h).
#include "backend/cuda/attention_generic.cuh"
#include "backend/cuda/attention_prefill.cuh"

namespace serve8 {

template void launch_prefill_typed<DType::kFP8E4M3>(const AttentionParams&, cudaStream_t);
template void launch_generic_typed<DType::kFP8E4M3>(const AttentionParams&, cudaStream_t);

}  // namespace serve8
