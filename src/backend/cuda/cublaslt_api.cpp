#include "backend/cuda/cublaslt_api.h"

#include <string>

#include "backend/cuda/shared_library.h"

namespace serve8 {

namespace {

CublasLtApi open_cublaslt() {
  const SharedLibrary lib("cuBLASLt", "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  CublasLtApi api{};
  lib.bind("cublasLtCreate", api.Create);
  lib.bind("cublasLtDestroy", api.Destroy);
  lib.bind("cublasLtGetStatusName", api.GetStatusName);
  lib.bind("cublasLtGetStatusString", api.GetStatusString);
  lib.bind("cublasLtMatmul", api.Matmul);
  lib.bind("cublasLtMatmulAlgoGetHeuristic", api.MatmulAlgoGetHeuristic);
  lib.bind("cublasLtMatmulDescCreate", api.MatmulDescCreate);
  lib.bind("cublasLtMatmulDescDestroy", api.MatmulDescDestroy);
  lib.bind("cublasLtMatmulDescSetAttribute", api.MatmulDescSetAttribute);
  lib.bind("cublasLtMatmulPreferenceCreate", api.MatmulPreferenceCreate);
  lib.bind("cublasLtMatmulPreferenceDestroy", api.MatmulPreferenceDestroy);
  lib.bind("cublasLtMatmulPreferenceSetAttribute", api.MatmulPreferenceSetAttribute);
  lib.bind("cublasLtMatrixLayoutCreate", api.MatrixLayoutCreate);
  lib.bind("cublasLtMatrixLayoutDestroy", api.MatrixLayoutDestroy);
  return api;
}

}  // namespace

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = open_cublaslt();
  return api;
}

}  // namespace serve8
