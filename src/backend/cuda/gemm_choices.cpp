#include "backend/cuda/gemm_choices.h"

#include "backend/cuda/skinny_gemm_plan.h"

namespace serve8 {
namespace {

constexpr Fp8GemmChoice kChoices[] = {
#include "backend/cuda/gemm_choices_table.inc"
};

// The entry of these weights (bf16 or e4m3) and matrix timed at the fewest rows >= m among those
// that run the same kernel of serve8's as m rows: up to kSkinnyMaxRows and past them serve8 runs
// different kernels (skinny_gemm_plan.h). Null where none was.
const Fp8GemmChoice* verdict_for(std::span<const Fp8GemmChoice> choices, bool bf16, int64_t n, int64_t k, int64_t m) {
  const auto regime = [](int64_t rows) { return rows > kSkinnyMaxRows; };
  const Fp8GemmChoice* best = nullptr;
  for (const Fp8GemmChoice& c : choices)
    if (c.bf16 == bf16 && c.n == n && c.k == k && c.rows >= m && regime(c.rows) == regime(m) &&
        (!best || c.rows < best->rows))
      best = &c;
  return best;
}

}  // namespace

std::span<const Fp8GemmChoice> fp8_gemm_choices() { return kChoices; }

std::vector<Fp8GemmChoice> fp8_gemm_choices_for(std::span<const Fp8GemmChoice> table, std::string_view device_name) {
  std::vector<Fp8GemmChoice> out;
  for (const Fp8GemmChoice& c : table)
    if (!c.device.empty() && device_name.find(c.device) != std::string_view::npos) out.push_back(c);
  return out;
}

bool fp8_gemm_takes_cublaslt(std::span<const Fp8GemmChoice> choices, int64_t n, int64_t k, int64_t m) {
  const Fp8GemmChoice* c = verdict_for(choices, false, n, k, m);
  return c && c->cublaslt;
}

bool bf16_gemm_takes_skinny(std::span<const Fp8GemmChoice> choices, int64_t n, int64_t k, int64_t m) {
  if (m < 1 || m > kSkinnyMaxRows) return false;
  const Fp8GemmChoice* c = verdict_for(choices, true, n, k, m);
  return c && !c->cublaslt;
}

bool gemm_choices_cover(std::span<const Fp8GemmChoice> choices, bool bf16, int64_t n, int64_t k) {
  for (const Fp8GemmChoice& c : choices)
    if (c.bf16 == bf16 && c.n == n && c.k == k) return true;
  return false;
}

bool gemm_timing_takes_library(double ours_us, double library_us) {
  constexpr double kMargin = 0.03;  // choices.py's --margin
  return library_us < (1.0 - kMargin) * ours_us;
}

}  // namespace serve8
