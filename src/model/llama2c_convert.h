// Import of llama2.c checkpoints into an HF model directory serve8 (and transformers) loads.
#pragma once

#include <string>

namespace serve8 {

// Writes output_dir/config.json (LlamaForCausalLM, float32) and output_dir/model.safetensors (F32,
// HF names, wq/wk rows permuted from llama2.c's interleaved RoPE pairs to HF's rotate-half
// layout), and copies tokenizer_model to output_dir/tokenizer.model when it is not empty.
void convert_llama2c(const std::string& checkpoint, const std::string& output_dir, const std::string& tokenizer_model);

}  // namespace serve8
