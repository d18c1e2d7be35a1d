#include "core/dtype.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace serve8 {

DType parse_dtype(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "fp32" || s == "float32" || s == "float" || s == "f32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp16" || s == "float16" || s == "half" || s == "f16") return DType::kF16;
  if (s == "fp8_e5m2" || s == "float8_e5m2" || s == "e5m2") return DType::kFP8E5M2;
  if (s == "fp8_e4m3" || s == "float8_e4m3fn" || s == "fp8_e4m3fn" || s == "e4m3" || s == "fp8") return DType::kFP8E4M3;
  if (s == "int8" || s == "i8") return DType::kI8;
  if (s == "int4" || s == "i4") return DType::kI4;
  fail("unknown dtype '{}' (expected fp32, bf16, fp16, fp8_e5m2, fp8_e4m3, int8 or int4)", name);
}

}  // namespace serve8
