// Where the scales of an fp8_e4m3 KV cache come from (stored = value / scale), in the order the
// engine tries them: a --quantization-param-path JSON (SGLang's and vLLM's format, as `serve8
// calibrate` writes it), then the checkpoint's own scale tensors. Nothing found means 1.0, which
// the engine says aloud.
#pragma once

#include <optional>
#include <string>

#include "backend/backend.h"

namespace serve8 {

// {"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {"<layer>": s, ...}}}}: one scale
// per layer for K and V alike (the outer key is the tensor-parallel rank; serve8 reads rank 0).
// serve8's extension, which takes precedence: "k_scale" / "v_scale": {"<layer>": s or [s per KV
// head]}. Throws serve8::Error naming the file and the field when the file does not fit the model
// (layer count, head count, dtype, non-positive or non-finite scales). With head_dim > 0, also
// serve8's "k_mean" / "v_mean": {"<layer>": [[head_dim values] per KV head]}, the means int8 and
// int4 pools store rows against (KvScales::k_mean), when the file has them.
KvScales read_kv_scales_json(const std::string& path, int num_layers, int num_kv_heads, int head_dim = 0);

// Writes the format above: scaling_factor = max(K, V) per layer, and k_scale / v_scale per layer
// (per_head: one per KV head; else the layer's scalar), and the means when scales has them. `note`
// goes under "calibration".
void write_kv_scales_json(const std::string& path, const KvScales& scales, int num_layers, int num_kv_heads,
                          bool per_head, const std::string& note);

// The checkpoint's scale tensors, under the names vLLM and ModelOpt export:
// model.layers.N.self_attn.{k_scale,v_scale}, ...self_attn.{k_proj,v_proj}.output_scale and
// ...self_attn.attn.{k_scale,v_scale}; a scalar or one per KV head. nullopt when there are none;
// throws when only some layers have them. model_path: an HF directory or a .safetensors file.
std::optional<KvScales> read_checkpoint_kv_scales(const std::string& model_path, int num_layers, int num_kv_heads);

}  // namespace serve8
