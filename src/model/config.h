// ModelConfig: the hyperparameters of a Llama-family model, read once from HF config.json and
// validated where it is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace serve8 {

struct RopeScaling {
  std::string type;  // "" (none) or "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// An FP8 checkpoint (config.json "quantization_config"): its matrices are stored float8_e4m3 with
// a weight_scale per tensor or per output channel; modules it left unquantized keep their dtype
// (the loader goes by each tensor's dtype). Static input scales are not used: activations are
// quantized per token at run time, as with --quantization fp8, unless the checkpoint has none.
struct Fp8Checkpoint {
  std::string method;  // "" (not FP8), compressed-tensors, fbgemm_fp8, fp8, modelopt
  // compressed-tensors without input_activations: the GEMMs take their inputs in the compute
  // dtype (FP8 weights, bf16 inputs), as vLLM runs such checkpoints.
  bool weight_only = false;
};

struct ModelConfig {
  std::string architecture;  // LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2)
  int bos_token_id = 1;
  std::vector<int> eos_token_ids;
  DType torch_dtype = DType::kBF16;
  Fp8Checkpoint fp8_checkpoint;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  int group_size() const { return num_heads / num_kv_heads; }
  // The RoPE frequencies [head_dim / 2], llama3 scaling applied where configured.
  std::vector<float> rope_inv_freq() const;
  // Parameter count (embeddings and LM head included once each unless tied).
  int64_t num_parameters() const;
};

// Reads <dir>/config.json (or a config.json path). Throws serve8::Error naming the file and field.
ModelConfig load_model_config(const std::string& path);
// Parses the text of a config.json; `origin` names it in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);
// Writes a config.json for this config (used by `serve8 convert`).
std::string model_config_to_json(const ModelConfig& config);

}  // namespace serve8
