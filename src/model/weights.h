// LlamaWeights: a Llama-family model's parameters in backend memory, in the backend's compute
// dtype, with Q/K/V and gate/up fused into one matrix each so each sub-layer is one GEMM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace serve8 {

struct LayerWeights {
  Tensor attn_norm;  // [H]
  Tensor wqkv;       // [q_size + 2 * kv_size, H]: rows of q_proj, then k_proj, then v_proj
  Tensor bqkv;       // [q_size + 2 * kv_size] or empty (attention_bias)
  Tensor wo;         // [H, q_size]
  Tensor ffn_norm;   // [H]
  Tensor w_gate_up;  // [2 * I, H]: rows of gate_proj, then up_proj
  Tensor w_down;     // [H, I]
};

struct LlamaWeights {
  Tensor embed;  // [V, H]
  std::vector<LayerWeights> layers;
  Tensor final_norm;            // [H]
  Tensor lm_head;               // [V, H]; the same memory as embed when tied
  std::vector<Buffer> storage;  // owns everything above
  size_t bytes = 0;             // total bytes in backend memory
};

// Loads an HF directory's *.safetensors (one file, or shards through model.safetensors.index.json)
// into the backend, converting bf16/fp16/fp32 to the compute dtype. Throws serve8::Error naming
// the file and tensor for a missing tensor, a wrong shape or an unsupported dtype.
LlamaWeights load_llama_weights(const ModelConfig& config, const std::string& model_dir, Backend& backend);

// Seeded random weights of the right shapes (for `--load-format dummy` benchmarks): norms near
// 1, matrices uniform with std about 1/sqrt(fan_in) so activations stay in range.
LlamaWeights dummy_llama_weights(const ModelConfig& config, Backend& backend, uint64_t seed);

}  // namespace serve8
