// cuBLASLt, opened when the first GEMM object is made rather than when serve8 starts: the library
// maps ~200 MB and adds ~60 ms to every start, which CPU-only runs (tests, `generate`) never use.
#pragma once

#include <cublasLt.h>

namespace serve8 {

struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// The library's entry points, opened on the first call (libcublasLt.so.<major> of the toolkit
// serve8 was built with, from the loader's path, else from that toolkit's directory). Throws Error
// naming what it tried when it cannot.
const CublasLtApi& cublaslt();

}  // namespace serve8
