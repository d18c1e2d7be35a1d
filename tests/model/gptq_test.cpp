// GPTQ onto e4m3: on inputs whose features are correlated it moves a layer's outputs less than
// rounding each weight alone; with uncorrelated inputs of equal variance it is that rounding.
#include "model/gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "core/error.h"

namespace serve8 {
namespace {

struct Layer {
  int64_t t, n, k;
  std::vector<float> x, w;  // x [t, k], w [n, k]
  std::vector<double> h;    // x^T x
};

// Inputs mixed from independent normals by a random matrix (correlated features, unequal
// variances), one input always zero; normal weights.
Layer random_layer(int64_t t, int64_t n, int64_t k, int64_t dead, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Layer l{t,
          n,
          k,
          std::vector<float>(static_cast<size_t>(t * k)),
          std::vector<float>(static_cast<size_t>(n * k)),
          std::vector<double>(static_cast<size_t>(k * k), 0.0)};
  std::vector<float> mix(static_cast<size_t>(k * k)), z(static_cast<size_t>(k));
  for (float& v : mix) v = nd(rng);
  for (int64_t r = 0; r < t; ++r) {
    for (float& v : z) v = nd(rng);
    for (int64_t j = 0; j < k; ++j) {
      float v = 0.0f;
      for (int64_t p = 0; p < k; ++p) v += z[static_cast<size_t>(p)] * mix[static_cast<size_t>(p * k + j)];
      l.x[static_cast<size_t>(r * k + j)] = j == dead ? 0.0f : v;
    }
  }
  for (float& v : l.w) v = nd(rng);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        l.h[static_cast<size_t>(i * k + j)] +=
            double{l.x[static_cast<size_t>(r * k + i)]} * l.x[static_cast<size_t>(r * k + j)];
  return l;
}

// || x (w - q)^T ||^2: how far the layer's outputs move.
double output_error(const Layer& l, const std::vector<float>& q) {
  double e = 0.0;
  for (int64_t r = 0; r < l.t; ++r) {
    for (int64_t o = 0; o < l.n; ++o) {
      double d = 0.0;
      for (int64_t j = 0; j < l.k; ++j)
        d += double{l.x[static_cast<size_t>(r * l.k + j)]} *
             (l.w[static_cast<size_t>(o * l.k + j)] - q[static_cast<size_t>(o * l.k + j)]);
      e += d * d;
    }
  }
  return e;
}

TEST(Gptq, MovesOutputsLessThanRoundingAlone) {
  const Layer l = random_layer(512, 48, 64, 5, 1);
  const Fp8Matrix rtn = round_fp8_rows(l.w, l.n, l.k);
  const Fp8Matrix gptq = round_fp8_rows_gptq(l.w, l.n, l.k, l.h);
  EXPECT_EQ(gptq.scale, rtn.scale);  // the same per-channel scales: only the codes differ
  const double e_rtn = output_error(l, fp8_matrix_values(rtn, l.n, l.k));
  const double e_gptq = output_error(l, fp8_matrix_values(gptq, l.n, l.k));
  EXPECT_LT(e_gptq, 0.7 * e_rtn) << "rtn " << e_rtn << " gptq " << e_gptq;
  for (int64_t i = 0; i < l.n * l.k; ++i) {
    const float v = e4m3_to_f32(gptq.codes[static_cast<size_t>(i)]);
    ASSERT_TRUE(std::isfinite(v) && std::fabs(v) <= kE4M3Max) << "code " << int{gptq.codes[static_cast<size_t>(i)]};
  }
  // The input that is always zero takes no other column's error: its weights are rounded alone.
  for (int64_t o = 0; o < l.n; ++o)
    EXPECT_EQ(gptq.codes[static_cast<size_t>(o * l.k + 5)], rtn.codes[static_cast<size_t>(o * l.k + 5)]);
}

TEST(Gptq, UncorrelatedInputsGiveRoundToNearest) {
  const Layer l = random_layer(1, 16, 32, -1, 2);
  std::vector<double> identity(static_cast<size_t>(32 * 32), 0.0);
  for (int64_t i = 0; i < 32; ++i) identity[static_cast<size_t>(i * 32 + i)] = 3.0;
  EXPECT_EQ(round_fp8_rows_gptq(l.w, 16, 32, identity).codes, round_fp8_rows(l.w, 16, 32).codes);
}

TEST(Gptq, RefusesMismatchedSizes) {
  const std::vector<float> w(12, 1.0f);
  EXPECT_THROW(round_fp8_rows_gptq(w, 3, 4, std::vector<double>(15, 0.0)), Error);
  EXPECT_THROW(round_fp8_rows(w, 5, 4), Error);
}

}  // namespace
}  // namespace serve8
