#include "backend/cuda/gemm_choices.h"

#include "backend/cuda/skinny_gemm_plan.h"

namespace serve8 {
namespace {

constexpr Fp8GemmChoice kChoices[] = {
#include "backend/cuda/gemm_choices_table.inc"
};

}  // namespace

std::span<const Fp8GemmChoice> fp8_gemm_choices() { return kChoices; }

std::vector<Fp8GemmChoice> fp8_gemm_choices_for(std::span<const Fp8GemmChoice> table, std::string_view device_name) {
  std::vector<Fp8GemmChoice> out;
  for (const Fp8GemmChoice& c : table)
    if (!c.device.empty() && device_name.find(c.device) != std::string_view::npos) out.push_back(c);
  return out;
}

bool fp8_gemm_takes_cublaslt(std::span<const Fp8GemmChoice> choices, int64_t n, int64_t k, int64_t m) {
  // Up to kSkinnyMaxRows rows and past them serve8 runs different kernels (skinny_gemm_plan.h).
  const auto regime = [](int64_t rows) { return rows > kSkinnyMaxRows; };
  const Fp8GemmChoice* best = nullptr;
  for (const Fp8GemmChoice& c : choices)
    if (!c.bf16 && c.n == n && c.k == k && c.rows >= m && regime(c.rows) == regime(m) && (!best || c.rows < best->rows))
      best = &c;
  return best && best->cublaslt;
}

bool bf16_gemm_takes_skinny(std::span<const Fp8GemmChoice> choices, int64_t n, int64_t k, int64_t m) {
  if (m < 1 || m > kSkinnyMaxRows) return false;
  const Fp8GemmChoice* best = nullptr;
  for (const Fp8GemmChoice& c : choices)
    if (c.bf16 && c.n == n && c.k == k && c.rows >= m && c.rows <= kSkinnyMaxRows && (!best || c.rows < best->rows))
      best = &c;
  return best && !best->cublaslt;
}

}  // namespace serve8
