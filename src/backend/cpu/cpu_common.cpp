// Entry-point checks and row conversions shared by the CPU ops.
#include "backend/cpu/cpu_common.h"

#include <string>

namespace serve8::cpu {

void check_tensor(const Tensor& t, std::string_view op, std::string_view name) {
  SERVE8_CHECK(t.ndim >= 1, "{}: {} has no shape", op, name);
  for (int i = 0; i < t.ndim; ++i) SERVE8_CHECK(t.dim(i) >= 0, "{}: {} has shape {}", op, name, t.shape_str());
  SERVE8_CHECK(t.data != nullptr || t.numel() == 0, "{}: {} {} has no data", op, name, t.shape_str());
}

void check_dtype(const Tensor& t, DType want, std::string_view op, std::string_view name) {
  SERVE8_CHECK(t.dtype == want, "{}: {} is {}, expected {}", op, name, dtype_name(t.dtype), dtype_name(want));
}

void check_float(const Tensor& t, std::string_view op, std::string_view name) {
  SERVE8_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16,
               "{}: {} is {}, expected fp32, bf16 or fp16", op, name, dtype_name(t.dtype));
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, std::string_view op, std::string_view name) {
  check_tensor(t, op, name);
  bool ok = t.ndim == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (ok && t.dim(i) != d) ok = false;
    ++i;
  }
  if (ok) return;
  std::string want = "[";
  i = 0;
  for (int64_t d : dims) want += (i++ ? ", " : "") + std::to_string(d);
  fail("{}: {} has shape {}, expected {}]", op, name, t.shape_str(), want);
}

void load_f32(const Tensor& t, int64_t offset, int64_t n, float* dst) {
  dispatch_float(t.dtype, "load", [&]<typename T>() {
    const T* src = t.ptr<const T>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
  });
}

void store_f32(const float* src, int64_t n, const Tensor& t, int64_t offset) {
  dispatch_float(t.dtype, "store", [&]<typename T>() {
    T* dst = t.ptr<T>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<T>(src[i]);
  });
}

}  // namespace serve8::cpu
