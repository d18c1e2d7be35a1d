// Prefill attention instantiated for the int4 KV pool (attention_instances.h); int8 and int4
// have no generic kernel (head dims 64 and 128 only).
#include "backend/cuda/attention_prefill.cuh"

namespace serve8 {

template void launch_prefill_typed<DType::kI4>(const AttentionParams&, cudaStream_t);

}  // namespace serve8
