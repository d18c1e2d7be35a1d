#include "backend/cuda/gemm.h"

#include <algorithm>

#include "backend/cuda/cublaslt_api.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace serve8 {
namespace {

// Enough for cuBLASLt's split-K and stream-K algorithms on Hopper.
constexpr size_t kWorkspaceBytes = 32ull << 20;

int alignment_of(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (u % static_cast<uintptr_t>(a)) != 0) a /= 2;
  return a;
}

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_16F:
      return "fp16";
    case CUDA_R_32F:
      return "fp32";
    case CUDA_R_8F_E4M3:
      return "e4m3";
    default:
      return "other";
  }
}

}  // namespace

CublasLtGemm::CublasLtGemm(cudaStream_t stream, int algo_rank) : stream_(stream), algo_rank_(algo_rank) {
  SERVE8_CUBLAS_CHECK(cublaslt().Create(&handle_));
  SERVE8_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublaslt().Destroy(handle_);
}

void CublasLtGemm::destroy(Plan& plan) {
  if (plan.a) cublaslt().MatrixLayoutDestroy(plan.a);
  if (plan.b) cublaslt().MatrixLayoutDestroy(plan.b);
  if (plan.d) cublaslt().MatrixLayoutDestroy(plan.d);
  if (plan.desc) cublaslt().MatmulDescDestroy(plan.desc);
  plan = Plan{};
}

bool CublasLtGemm::try_plan(Plan& plan, const GemmArgs& args, bool with_bias, bool scale_vectors, int align_x,
                            int align_w, int align_out, int align_bias) {
  // fp32 accumulation. With fp32 x and w (--dtype float32) the products are fp32 too: plain
  // CUBLAS_COMPUTE_32F is IEEE fp32, never TF32 (that would take CUBLAS_COMPUTE_32F_FAST_TF32, and
  // cuBLASLt has no handle-wide math mode that could turn it on), so fp32 results match the CPU's.
  SERVE8_CUBLAS_CHECK(cublaslt().MatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  SERVE8_CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  SERVE8_CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (with_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    SERVE8_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const int32_t bias_type = args.bias_type;
    SERVE8_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                          sizeof(bias_type)));
  }
  if (scale_vectors) {
    // A is w: its vector runs over cuBLASLt's M, our N; B is x: over cuBLASLt's N, our M.
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    SERVE8_CUBLAS_CHECK(
        cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    SERVE8_CUBLAS_CHECK(
        cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  }
  SERVE8_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan.a, args.in_type, args.k, args.n, args.k));
  SERVE8_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan.b, args.in_type, args.k, args.m, args.k));
  SERVE8_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan.d, args.out_type, args.n, args.m, args.n));

  cublasLtMatmulPreference_t pref = nullptr;
  SERVE8_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  SERVE8_CUBLAS_CHECK(
      cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // A is w, B is x, C and D are out; cuBLASLt otherwise assumes 256-byte aligned pointers.
  const uint32_t aligns[4] = {static_cast<uint32_t>(align_w), static_cast<uint32_t>(align_x),
                              static_cast<uint32_t>(align_out), static_cast<uint32_t>(align_out)};
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    SERVE8_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof(uint32_t)));
  (void)align_bias;  // the bias vector has no alignment preference; cudaMalloc'd weights are aligned
  constexpr int kMaxRank = 16;
  cublasLtMatmulHeuristicResult_t results[kMaxRank]{};
  int found = 0;
  const int want = std::min(algo_rank_ + 1, kMaxRank);
  const cublasStatus_t st = cublaslt().MatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, pref,
                                                              want, results, &found);
  cublaslt().MatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found <= algo_rank_) {
    destroy(plan);
    return false;
  }
  plan.algo = results[algo_rank_].algo;
  plan.bias_epilogue = with_bias;
  plan.scale_vectors = scale_vectors;
  return true;
}

CublasLtGemm::Plan& CublasLtGemm::plan_for(const GemmArgs& args, const Key& key, int align_x, int align_w,
                                           int align_out, int align_bias) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan;
  bool ok = false;
  // e4m3 with cuBLASLt's per-row scale vectors where it has an algorithm; else unscaled, and the
  // scales and bias follow in one small kernel.
  const bool fp8 = args.in_type == CUDA_R_8F_E4M3;
  for (int attempt = fp8 ? 0 : 1; attempt < 2 && !ok; ++attempt) {
    const bool scales = attempt == 0;
    if (args.bias && (scales || !fp8)) ok = try_plan(plan, args, true, scales, align_x, align_w, align_out, align_bias);
    if (!ok) ok = try_plan(plan, args, false, scales, align_x, align_w, align_out, align_bias);
  }
  SERVE8_CHECK(ok, "gemm: cuBLASLt has no algorithm for M={} N={} K={} in {} out {} (alignments x {} w {} out {})",
               args.m, args.n, args.k, type_name(args.in_type), type_name(args.out_type), align_x, align_w, align_out);
  return plans_.emplace(key, plan).first->second;
}

void CublasLtGemm::run(const GemmArgs& args) {
  if (args.m == 0 || args.n == 0) return;
  const int align_x = alignment_of(args.x), align_w = alignment_of(args.w), align_out = alignment_of(args.out);
  const int align_bias = args.bias ? alignment_of(args.bias) : 0;
  const Key key{args.m,
                args.n,
                args.k,
                static_cast<int>(args.in_type),
                static_cast<int>(args.out_type),
                args.bias ? static_cast<int>(args.bias_type) : -1,
                align_x,
                align_w,
                align_out,
                align_bias};
  Plan& plan = plan_for(args, key, align_x, align_w, align_out, align_bias);
  if (plan.bias_epilogue) {
    SERVE8_CUBLAS_CHECK(
        cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias, sizeof(args.bias)));
  }
  if (plan.scale_vectors) {
    SERVE8_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                          &args.w_scale, sizeof(args.w_scale)));
    SERVE8_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                          &args.x_scale, sizeof(args.x_scale)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  SERVE8_CUBLAS_CHECK(cublaslt().Matmul(handle_, plan.desc, &alpha, args.w, plan.a, args.x, plan.b, &beta, args.out,
                                        plan.d, args.out, plan.d, &plan.algo, workspace_, workspace_bytes_, stream_));
  if (args.in_type == CUDA_R_8F_E4M3 && !plan.scale_vectors) {
    Fp8ScaleParams p;
    p.out = args.out;
    p.out_f32 = args.out_type == CUDA_R_32F;
    p.x_scale = args.x_scale;
    p.w_scale = args.w_scale;
    p.bias = args.bias;
    p.bias_f32 = args.bias_type == CUDA_R_32F;
    p.rows = args.m;
    p.cols = args.n;
    launch_fp8_scale(p, stream_);
  } else if (args.bias && !plan.bias_epilogue) {
    BiasAddParams p;
    p.out = args.out;
    p.out_f32 = args.out_type == CUDA_R_32F;
    p.bias = args.bias;
    p.bias_f32 = args.bias_type == CUDA_R_32F;
    p.rows = args.m;
    p.cols = args.n;
    launch_bias_add(p, stream_);
  }
}

}  // namespace serve8
