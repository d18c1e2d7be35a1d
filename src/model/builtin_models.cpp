#include "model/builtin_models.h"

namespace serve8 {

ModelConfig builtin_tiny_llama_config() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = c.hidden_size / c.num_heads;
  c.vocab_size = 32000;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.torch_dtype = DType::kF32;
  return c;
}

bool is_builtin_model_path(const std::string& model_path) { return model_path == kBuiltinTinyLlamaPath; }

}  // namespace serve8
