#include "model/quant_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace serve8 {
namespace {

using Json = nlohmann::json;

// compressed-tensors (llm-compressor): every config group must be FP8 weights, per tensor or per
// channel; activations may be anything FP8 (serve8 quantizes them per token at run time), or absent
// in every group (weight-only: returns true).
bool check_compressed_tensors(const Json& q, const std::string& origin) {
  int with_inputs = 0, without_inputs = 0;
  SERVE8_CHECK(q.contains("config_groups") && q.at("config_groups").is_object() && !q.at("config_groups").empty(),
               "{}: compressed-tensors quantization_config has no config_groups", origin);
  for (const auto& [name, group] : q.at("config_groups").items()) {
    SERVE8_CHECK(group.is_object() && group.contains("weights") && group.at("weights").is_object(),
                 "{}: compressed-tensors group '{}' has no 'weights' scheme", origin, name);
    const Json& w = group.at("weights");
    const std::string type = w.value("type", "");
    const int bits = w.value("num_bits", 0);
    const std::string strategy = w.value("strategy", "");
    SERVE8_CHECK(type == "float" && bits == 8,
                 "{}: compressed-tensors group '{}' stores {}-bit {} weights; serve8 loads 8-bit float (FP8) ones",
                 origin, name, bits, type.empty() ? "?" : type);
    SERVE8_CHECK(strategy == "tensor" || strategy == "channel",
                 "{}: compressed-tensors group '{}' scales weights per '{}'; serve8 takes per-tensor or per-channel "
                 "scales",
                 origin, name, strategy);
    const bool inputs = group.contains("input_activations") && !group.at("input_activations").is_null();
    ++(inputs ? with_inputs : without_inputs);
  }
  SERVE8_CHECK(with_inputs == 0 || without_inputs == 0,
               "{}: compressed-tensors groups disagree on input_activations ({} quantize their inputs, {} do not); "
               "serve8 takes one scheme for every matrix",
               origin, with_inputs, without_inputs);
  return without_inputs > 0;
}

}  // namespace

Fp8Checkpoint parse_quantization_config(const Json& q, const std::string& origin) {
  SERVE8_CHECK(q.is_object(), "{}: quantization_config must be an object, got {}", origin, q.dump());
  Fp8Checkpoint c;
  std::string method = q.value("quant_method", "");
  // ModelOpt writes {"quant_method": "modelopt", "quant_algo": "FP8"} (or its algo under "quantization").
  const std::string algo = q.contains("quantization") && q.at("quantization").is_object()
                               ? q.at("quantization").value("quant_algo", "")
                               : q.value("quant_algo", "");
  if (method.empty() && !algo.empty()) method = "modelopt";
  if (method == "compressed-tensors") {
    c.weight_only = check_compressed_tensors(q, origin);
  } else if (method == "fbgemm_fp8") {
  } else if (method == "fp8") {
    SERVE8_CHECK(!q.contains("weight_block_size") || q.at("weight_block_size").is_null(),
                 "{}: block-wise FP8 (quantization_config.weight_block_size {}) is not supported; serve8 takes FP8 "
                 "weights with per-tensor or per-channel scales",
                 origin, q.contains("weight_block_size") ? q.at("weight_block_size").dump() : "");
  } else if (method == "modelopt") {
    SERVE8_CHECK(algo == "FP8", "{}: ModelOpt quant_algo '{}' is not supported; serve8 loads its FP8 checkpoints",
                 origin, algo);
  } else {
    fail(
        "{}: quantization_config.quant_method '{}' is not supported; serve8 loads FP8 checkpoints "
        "(compressed-tensors, fbgemm_fp8, fp8, modelopt) and quantizes others with --quantization fp8",
        origin, method);
  }
  c.method = method;
  return c;
}

}  // namespace serve8
