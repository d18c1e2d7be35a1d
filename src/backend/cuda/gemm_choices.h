// Which GEMM a decode shape takes on a GPU: serve8's skinny kernels, or cuBLASLt where bench_gemm
// timed it faster. gemm_choices_table.inc holds the timings' verdicts, written by
// bench/gemm/choices.py from bench_gemm records; shapes it lacks are timed as the decode graphs
// are captured (gemm_tuning.cpp, --gemm-tuning). Without a verdict (--gemm-tuning off, no graphs)
// FP8 (e4m3 tokens) shapes take serve8's kernels, bf16 ones cuBLASLt. Plain host code, built
// without CUDA.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace serve8 {

struct Fp8GemmChoice {
  std::string_view device;  // part of the GPU's name: "H100", "H200"
  int64_t n = 0, k = 0;     // the weight matrix, [n, k]
  int64_t rows = 0;         // the token rows timed
  bool cublaslt = false;    // cuBLASLt was faster at these rows
  bool bf16 = false;        // bf16 weights and tokens (1-16 rows), else e4m3
};

// The table measured (gemm_choices_table.inc).
std::span<const Fp8GemmChoice> fp8_gemm_choices();

// The entries of `table` for a GPU of this name.
std::vector<Fp8GemmChoice> fp8_gemm_choices_for(std::span<const Fp8GemmChoice> table, std::string_view device_name);

// Whether m rows of [n, k] take cuBLASLt: the verdict timed at the fewest rows >= m for the
// matrix among those that run the same kernel of serve8's (1-16 rows, 17-64), so 64 rows speak
// for 33-64 when 32 and 64 were timed; false where none was.
bool fp8_gemm_takes_cublaslt(std::span<const Fp8GemmChoice> choices, int64_t n, int64_t k, int64_t m);

// Whether m bf16 rows of a bf16 [n, k] take serve8's skinny kernel: 1-16 rows, where the verdict
// timed at the fewest rows >= m (up to 16) says it beat cuBLASLt bf16; false where none was.
bool bf16_gemm_takes_skinny(std::span<const Fp8GemmChoice> choices, int64_t n, int64_t k, int64_t m);

// Whether the table holds any verdict for the bf16 (or e4m3) matrix [n, k].
bool gemm_choices_cover(std::span<const Fp8GemmChoice> choices, bool bf16, int64_t n, int64_t k);

// The verdict of a shape timed at start-up (us per launch), as bench/gemm/choices.py gives the
// table's: cuBLASLt where it was faster than serve8's kernel by more than 3%.
bool gemm_timing_takes_library(double ours_us, double library_us);

}  // namespace serve8
