// Models serve8 can run with no files at all: `serve8 serve` with no --model-path serves one, so a
// first run (and the server tests) work before any checkpoint is downloaded.
#pragma once

#include <string>

#include "model/config.h"

namespace serve8 {

// The model path that names the built-in tiny Llama (dummy weights).
inline constexpr const char* kBuiltinTinyLlamaPath = "builtin:tiny-llama";

// A two-layer Llama with the Llama-2 vocabulary (32000), so the Llama-2 tokenizer fits it: hidden
// 128, 4 heads over 2 KV heads, intermediate 256, 2048 positions. Its weights are random; it
// produces text-shaped noise, which is all a server smoke test needs.
ModelConfig builtin_tiny_llama_config();

// True when `model_path` names a built-in model rather than a directory.
bool is_builtin_model_path(const std::string& model_path);

}  // namespace serve8
