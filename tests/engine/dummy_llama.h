// A 2-layer Llama (hidden 512, 4 query heads on 2 KV heads, vocab 1000) for dummy weights: the
// GPU tests' small model, big enough for real kernel tiles.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace serve8::testing {

// Writes its config.json into a directory of this process's named by `tag`; returns the directory.
inline std::string write_dummy_llama_config(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("serve8-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 512,
    "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 1000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})";
  return dir.string();
}

}  // namespace serve8::testing
