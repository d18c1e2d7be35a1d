// Llama-family models from a GGUF file (llama.cpp's naming): the config from the metadata of
// architectures `llama` and `qwen2`, the weights dequantized at load into the compute dtype.
#pragma once

#include "model/config.h"
#include "formats/gguf_dequant.h"
#include "model/weights.h"

namespace serve8 {

// Throws serve8::Error naming the file and the metadata key at fault.
ModelConfig gguf_model_config(const GgufFile& file);

// llama.cpp's converter stores the q and k projections of `llama` models with each head's rows
// interleaved for its RoPE (pairs (2i, 2i+1)); they are put back in HF's rotate-half order
// (pairs (i, i + D/2)) here, so the rest of serve8 sees one layout.
LlamaWeights load_gguf_weights(const ModelConfig& config, const GgufFile& file, Backend& backend,
                               WeightQuant quant = WeightQuant::kNone);

}  // namespace serve8
