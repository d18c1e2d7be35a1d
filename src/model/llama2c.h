// Import of llama2.c checkpoints (legacy format, version 0) into an HF model directory.
#pragma once

#include <cstdint>
#include <string>

namespace serve8 {

// The seven int32s at the start of a llama2.c checkpoint. vocab_size is stored negative when a
// separate classifier follows the weights; here it is always positive and `shared_classifier` says.
struct Llama2cHeader {
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;
  int seq_len = 0;
  bool shared_classifier = true;

  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_size(); }
  // Bytes the whole file must have: header, weights, the two RoPE tables, the classifier if any.
  uint64_t file_bytes() const;
};

// Reads and validates the header of `checkpoint` (sizes against the file length).
Llama2cHeader read_llama2c_header(const std::string& checkpoint);

// Writes output_dir/config.json (LlamaForCausalLM, float32) and output_dir/model.safetensors (F32,
// HF names, wq/wk rows permuted from llama2.c's interleaved RoPE pairs to HF's rotate-half
// layout), and copies tokenizer_model to output_dir/tokenizer.model when it is not empty.
void convert_llama2c(const std::string& checkpoint, const std::string& output_dir, const std::string& tokenizer_model);

// Row order that turns one head's interleaved-pair rows into rotate-half rows: new row j of a
// head is old row perm[j]; evens first, then odds ([0, 2, 4, .., 1, 3, 5, ..]).
int llama2c_rope_row(int new_row, int head_size);

}  // namespace serve8
