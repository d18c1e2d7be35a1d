// Helpers of the CUDA backend tests: a fixture that skips without a GPU and holds both backends,
// and error measures against the CPU reference (copies to and from the device: backend_test_util.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"

namespace serve8::test {

// Fills device memory with 0xff bytes (NaN in every float format), so unwritten outputs show.
inline void poison(Backend& be, void* data, size_t bytes) {
  std::vector<uint8_t> ff(bytes, 0xff);
  be.copy_to_device(data, ff.data(), bytes);
}

// ||a - b|| / ||b||, and NaN anywhere fails.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Values of `v` rounded to bf16, so that the CPU (fp32) and GPU (bf16) see the same numbers.
inline std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
    gpu_ = create_backend("cuda");
    cpu_ = create_backend("cpu");
  }
  std::unique_ptr<Backend> gpu_, cpu_;
  Rng rng_{1234};
};

}  // namespace serve8::test
