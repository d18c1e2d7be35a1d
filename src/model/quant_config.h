// config.json's "quantization_config" (and ModelOpt's hf_quant_config.json): which FP8 checkpoint
// format a model directory holds. Internal to model/: config.cpp and the weight loader.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/config.h"

namespace serve8 {

// Reads the object of "quantization_config"; throws naming `origin` for a method serve8 does not
// load (AWQ, GPTQ, ...) or an FP8 layout it does not run (block-wise scales).
Fp8Checkpoint parse_quantization_config(const nlohmann::json& q, const std::string& origin);

}  // namespace serve8
