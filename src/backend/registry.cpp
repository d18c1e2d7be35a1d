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
  if (device == "cpu") return create_cpu_backend();
  if (device == "cuda") {
#ifdef SERVE8_HAVE_CUDA
    SERVE8_CHECK(cuda_device_count() > 0, "--device cuda: no CUDA GPU is visible");
    return create_cuda_backend();
#else
    fail("--device cuda: this serve8 was built without CUDA (nvcc was not found at configure time)");
#endif
  }
  fail("unknown device '{}' (expected cpu or cuda)", device);
}

}  // namespace serve8
