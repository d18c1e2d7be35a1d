// Dequantization of the GGML tensor types serve8 loads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
// Q5_K, Q6_K) into fp32, for the GGUF model loader (formats/gguf_file.h reads the file).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/gguf_file.h"

namespace serve8 {

// Dequantizes n elements (a multiple of the type's block size) of a GGML type into out.
void dequantize_ggml(uint32_t type, const uint8_t* src, int64_t n, float* out);
// The whole tensor as fp32, row-major in HF order; throws for types serve8 does not dequantize.
std::vector<float> dequantize(const GgufFile& file, const GgufTensor& t);

}  // namespace serve8
