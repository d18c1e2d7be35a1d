// GEMM through cuBLASLt: out[M, N] = x[M, K] · w[N, K]^T (+ bias[N]), row-major, fp32 accumulation.
//
// Row-major out is column-major out^T = w · x^T, so cuBLASLt sees A = w (transposed, K×N, ld K),
// B = x (K×M, ld K) and D = out^T (N×M, ld N); the bias epilogue then adds bias[n] per row of D,
// which is per column of out. Plans (descriptors, layouts and the heuristic's algorithm) are cached
// per shape, dtype and pointer alignment.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace serve8 {

struct GemmArgs {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // optional
  void* out = nullptr;
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t in_type = CUDA_R_16BF;  // x and w: bf16, fp16, fp32 or e4m3
  cudaDataType_t out_type = CUDA_R_16BF;
  cudaDataType_t bias_type = CUDA_R_16BF;
  // e4m3 only: out[m, n] is scaled by x_scale[m] * w_scale[n] (fp32 vectors).
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
};

class CublasLtGemm {
 public:
  // algo_rank: which of the heuristic's algorithms plans take (0, its first choice, unless
  // bench_gemm asks for another); a shape with fewer algorithms than that is refused.
  explicit CublasLtGemm(cudaStream_t stream, int algo_rank = 0);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  void run(const GemmArgs& args);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool bias_epilogue = false;  // else a separate kernel adds the bias
    bool scale_vectors = false;  // e4m3: cuBLASLt applies the scales, else a separate kernel does
  };
  // m, n, k, in, out, bias type (or -1 without bias), alignments of x, w, out and bias.
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int, int, int, int, int>;

  Plan& plan_for(const GemmArgs& args, const Key& key, int align_x, int align_w, int align_out, int align_bias);
  bool try_plan(Plan& plan, const GemmArgs& args, bool with_bias, bool scale_vectors, int align_x, int align_w,
                int align_out, int align_bias);
  static void destroy(Plan& plan);

  cudaStream_t stream_;
  int algo_rank_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace serve8
