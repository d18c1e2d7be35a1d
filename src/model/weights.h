// LlamaWeights: a Llama-family model's parameters in backend memory, in the backend's compute
// dtype, with Q/K/V and gate/up fused into one matrix each so each sub-layer is one GEMM. With FP8
// weights the four matrices of a layer are e4m3 with one fp32 scale per row (output channel).
#pragma once

#include <array>
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
  // FP8 weights only: [rows] fp32, one per row of the matrix of the same name.
  Tensor wqkv_scale, wo_scale, w_gate_up_scale, w_down_scale;
  bool any_fp8() const {
    for (const Tensor* m : {&wqkv, &wo, &w_gate_up, &w_down})
      if (m->dtype == DType::kFP8E4M3) return true;
    return false;
  }
};

struct LlamaWeights {
  Tensor embed;  // [V, H]
  std::vector<LayerWeights> layers;
  Tensor final_norm;            // [H]
  Tensor lm_head;               // [V, H]; the same memory as embed when tied
  std::vector<Buffer> storage;  // owns everything above
  size_t bytes = 0;             // total bytes in backend memory
};

// One HF module of a fused layer matrix ("model.layers.3.self_attn.q_proj"; its tensors are
// <module>.weight, .bias, .weight_scale) and the rows it holds.
struct HfModule {
  std::string name;
  int64_t rows;
};
// The modules of layer `layer`'s four matrices in LlamaModel::Matrix order (qkv, o, gate_up,
// down), laid end to end as LayerWeights fuses them.
std::array<std::vector<HfModule>, 4> layer_modules(const ModelConfig& c, int layer);

// How the layers' matrices are kept: in the compute dtype, or quantized at load to e4m3 per output
// channel (--quantization fp8), one matrix at a time on the backend.
enum class WeightQuant { kNone, kFp8 };
// "" / "none" -> kNone, "fp8" -> kFp8; throws naming --quantization for anything else.
WeightQuant parse_weight_quant(const std::string& name);
// If `target` is one of a layer's four matrices and quant is kFp8, replaces it (and frees its
// buffer in w.storage) by its e4m3 rows and their scales. The loaders call it as each tensor lands.
void quantize_if_matrix(LlamaWeights& w, Tensor* target, WeightQuant quant, Backend& backend);
// Backend bytes the weights of `config` take in `compute` (the layers' matrices in e4m3 with fp32
// row scales under kFp8), plus the one matrix held in `compute` while it is quantized.
uint64_t weight_bytes_needed(const ModelConfig& config, DType compute, WeightQuant quant);
// Throws, before a byte is loaded, when they exceed what the backend says it has free.
void check_weights_fit(const ModelConfig& config, Backend& backend, WeightQuant quant, const std::string& origin);
// "bf16", or "fp8_e4m3 (per-channel scales) + bf16" where the matrices are FP8: logs and server info.
std::string weight_dtype_name(const LlamaWeights& w, DType compute);

// Loads an HF directory's *.safetensors (one file, or shards through model.safetensors.index.json)
// into the backend, converting bf16/fp16/fp32 to the compute dtype. Throws serve8::Error naming
// the file and tensor for a missing tensor, a wrong shape or an unsupported dtype.
LlamaWeights load_llama_weights(const ModelConfig& config, const std::string& model_dir, Backend& backend,
                                WeightQuant quant = WeightQuant::kNone);

// Seeded random weights of the right shapes (for `--load-format dummy` benchmarks): norms near
// 1, matrices uniform with std about 1/sqrt(fan_in) so activations stay in range.
LlamaWeights dummy_llama_weights(const ModelConfig& config, Backend& backend, uint64_t seed,
                                 WeightQuant quant = WeightQuant::kNone);

}  // namespace serve8
