// GPTQ rounding of a weight matrix onto the e4m3 grid (Frantar et al., "GPTQ", 2022), for FP8
// checkpoints whose weights' 3-bit mantissa costs too much when each weight is rounded alone
// (docs/accuracy.md, FP8 weights). Columns are rounded in order, and each column's rounding error
// is spread over the columns not yet rounded through the inverse of H = sum over calibration
// tokens of x x^T (x: the matrix's input), so that the layer's outputs X W^T move least.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace serve8 {

// One scale per output channel (its largest |weight| maps to 448) and e4m3 codes, [N, K].
struct Fp8Matrix {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
};

// w [N, K] row-major (output channels by inputs), each row rounded to its nearest e4m3 values.
Fp8Matrix round_fp8_rows(std::span<const float> w, int64_t n, int64_t k);

// w [N, K] as above, rounded GPTQ's way; h [K, K] symmetric positive semi-definite (the inputs'
// second moments, both triangles). damp: fraction of H's mean diagonal added to its diagonal
// (GPTQ's 0.01) so that it inverts; inputs that never vary (zero diagonal) keep their weights
// rounded alone. act_order: columns of the inputs with the largest second moments first (GPTQ's
// act-order), whose errors then spread over the rest. Throws serve8::Error on mismatched sizes or
// an H that still does not factor.
Fp8Matrix round_fp8_rows_gptq(std::span<const float> w, int64_t n, int64_t k, std::span<const double> h,
                              double damp = 0.01, bool act_order = true);

// The weights an Fp8Matrix stands for, [N, K] fp32.
std::vector<float> fp8_matrix_values(const Fp8Matrix& m, int64_t n, int64_t k);

}  // namespace serve8
