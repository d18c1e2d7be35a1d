// Picks the backend named on the command line.
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#ifdef SERVE8_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace serve8 {

bool cuda_available() {
#ifdef SERVE8_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> create_backend(const std::string& device) {
  return create_backend(device, device == "cpu" ? DType::kF32 : DType::kBF16);
}

std::unique_ptr<Backend> create_backend(const std::string& device, DType compute, int index) {
  if (device == "cpu") {
    SERVE8_CHECK(compute == DType::kF32,
                 "--dtype: the CPU backend computes in fp32 only, not {} (use --dtype auto or float32)",
                 dtype_name(compute));
    (void)index;
    return create_cpu_backend();
  }
  if (device == "cuda") {
#ifdef SERVE8_HAVE_CUDA
    SERVE8_CHECK(compute == DType::kBF16 || compute == DType::kF32,
                 "--dtype: the CUDA backend computes in bf16 or fp32, not {}{}", dtype_name(compute),
                 compute == DType::kF16 ? " (fp16 compute is not supported yet)" : "");
    SERVE8_CHECK(cuda_device_count() > 0, "--device cuda: no CUDA GPU is visible");
    return create_cuda_backend(compute, {}, index);
#else
    fail("--device cuda: this serve8 was built without CUDA (nvcc was not found at configure time)");
#endif
  }
  fail("unknown device '{}' (expected cpu or cuda)", device);
}

}  // namespace serve8
