#include "backend/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace serve8 {

namespace {

template <typename F>
void bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  SERVE8_CHECK(fn != nullptr, "cuBLASLt: no symbol {} in the library ({})", name, dlerror());
}

CublasLtApi open_cublaslt() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  const std::string in_toolkit = std::string(SERVE8_CUDA_LIBRARY_DIR) + "/" + soname;
  if (lib == nullptr) lib = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
  SERVE8_CHECK(lib != nullptr, "cuBLASLt: cannot open {} (from the loader's path or {}): {}", soname, in_toolkit,
               dlerror());
  CublasLtApi api{};
  bind(lib, "cublasLtCreate", api.Create);
  bind(lib, "cublasLtDestroy", api.Destroy);
  bind(lib, "cublasLtGetStatusName", api.GetStatusName);
  bind(lib, "cublasLtGetStatusString", api.GetStatusString);
  bind(lib, "cublasLtMatmul", api.Matmul);
  bind(lib, "cublasLtMatmulAlgoGetHeuristic", api.MatmulAlgoGetHeuristic);
  bind(lib, "cublasLtMatmulDescCreate", api.MatmulDescCreate);
  bind(lib, "cublasLtMatmulDescDestroy", api.MatmulDescDestroy);
  bind(lib, "cublasLtMatmulDescSetAttribute", api.MatmulDescSetAttribute);
  bind(lib, "cublasLtMatmulPreferenceCreate", api.MatmulPreferenceCreate);
  bind(lib, "cublasLtMatmulPreferenceDestroy", api.MatmulPreferenceDestroy);
  bind(lib, "cublasLtMatmulPreferenceSetAttribute", api.MatmulPreferenceSetAttribute);
  bind(lib, "cublasLtMatrixLayoutCreate", api.MatrixLayoutCreate);
  bind(lib, "cublasLtMatrixLayoutDestroy", api.MatrixLayoutDestroy);
  return api;  // the library stays open for the process's life
}

}  // namespace

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = open_cublaslt();
  return api;
}

}  // namespace serve8
