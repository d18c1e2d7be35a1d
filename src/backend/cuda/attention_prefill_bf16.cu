// Prefill and generic attention instantiated for the bf16 KV pool (attention_instances.h).
#include "backend/cuda/attention_generic.cuh"
#include "backend/cuda/attention_prefill.cuh"

namespace serve8 {

template void launch_prefill_typed<DType::kBF16>(const AttentionParams&, cudaStream_t);
template void launch_generic_typed<DType::kBF16>(const AttentionParams&, cudaStream_t);

}  // namespace serve8
