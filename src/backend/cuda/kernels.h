// Launchers of the CUDA backend's small kernels (everything but GEMM, attention and sampling).
// The backend checks shapes and dtypes at its op entry points; these trust their parameters.
// Activations are bf16 or fp32 (the backend's compute dtype), passed untyped with their DType so
// that this header stays plain C++; the launchers dispatch on it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace serve8 {

// Whether p allows 16-byte accesses: the vector paths' condition, on the host and in kernels.
__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// dst[i] = src[rows[i] - first_row] for whole rows of row_bytes bytes (embedding, its
// vocabulary-parallel shard, and gather_rows).
struct GatherRowsParams {
  const void* src = nullptr;
  const int32_t* rows = nullptr;
  void* dst = nullptr;
  int64_t row_bytes = 0;
  int64_t first_row = 0;
  int64_t num_src_rows = 0;  // rows[i] - first_row outside [0, num_src_rows) gives a zero row
  int num_rows = 0;
};
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream);

// out = rmsnorm(x) * weight; with residual set: residual += x (stored in the activation dtype),
// then the norm of the new residual.
struct RmsNormParams {
  DType dtype = DType::kBF16;  // of x, residual and out: bf16 or fp32
  const void* x = nullptr;
  void* residual = nullptr;  // null: plain rmsnorm
  const void* weight = nullptr;
  bool weight_f32 = false;  // else bf16
  void* out = nullptr;
  uint8_t* q = nullptr;  // optional: out's FP8 rows too (Backend::Fp8Rows)
  float* q_scale = nullptr;
  int rows = 0;
  int hidden = 0;
  float eps = 0.0f;
};
void launch_rmsnorm(const RmsNormParams& p, cudaStream_t stream);

// HF rotate-half RoPE: q's heads rotated into q_out [T, Hq, D], k's in place. A token's heads lie
// q_stride (k_stride) elements after the previous token's: one QKV GEMM's output rows, or [T, H, D].
struct RopeParams {
  DType dtype = DType::kBF16;  // of q and k: bf16 or fp32
  const void* q = nullptr;
  void* q_out = nullptr;  // may be q itself when q_stride == Hq * D
  void* k = nullptr;
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int num_tokens = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};
void launch_rope(const RopeParams& p, cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i].
struct SiluMulParams {
  DType dtype = DType::kBF16;  // of gate_up and out: bf16 or fp32
  const void* gate_up = nullptr;
  void* out = nullptr;
  uint8_t* q = nullptr;  // optional: out's FP8 rows too (Backend::Fp8Rows)
  float* q_scale = nullptr;
  int rows = 0;
  int inter = 0;
};
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream);

// out[m, n] += bias[n], for GEMMs whose bias cannot ride the cuBLASLt epilogue.
struct BiasAddParams {
  void* out = nullptr;
  bool out_f32 = false;  // else bf16
  const void* bias = nullptr;
  bool bias_f32 = false;
  int64_t rows = 0;
  int64_t cols = 0;
};
void launch_bias_add(const BiasAddParams& p, cudaStream_t stream);

// q[r] = e4m3(x[r] * 448 / max|x[r]|), scale[r] = max|x[r]| / 448 (1 for a zero row); x bf16 or fp32.
struct Fp8QuantParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;
  uint8_t* q = nullptr;
  float* scale = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};
void launch_quantize_fp8_rows(const Fp8QuantParams& p, cudaStream_t stream);

// out[m, n] = out[m, n] * x_scale[m] * w_scale[n] (+ bias[n]), after an unscaled FP8 GEMM.
struct Fp8ScaleParams {
  void* out = nullptr;
  bool out_f32 = false;  // else bf16
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  const void* bias = nullptr;  // optional
  bool bias_f32 = false;
  int64_t rows = 0;
  int64_t cols = 0;
};
void launch_fp8_scale(const Fp8ScaleParams& p, cudaStream_t stream);

// out[r, c] = e4m3(q[r, c]) * scale[r] in the compute dtype (bf16 or fp32): a weight-only FP8
// matrix widened for a GEMM with more rows than the skinny kernel takes.
struct Fp8WidenParams {
  DType dtype = DType::kBF16;
  const uint8_t* q = nullptr;
  const float* scale = nullptr;
  void* out = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};
void launch_widen_fp8_rows(const Fp8WidenParams& p, cudaStream_t stream);

// Writes k, v [T, Hkv, D] (bf16 or fp32) into the pool at out_slots: value / scale[head], converted
// to the storage dtype with core/dtype.h's conversions, so the bytes equal the CPU backend's.
struct KvStoreParams {
  DType dtype = DType::kBF16;  // of k and v: bf16 or fp32
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride = 0;  // elements from one token's heads to the next's (RopeParams)
  int64_t v_stride = 0;
  const int32_t* out_slots = nullptr;
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  const float* k_scale = nullptr;  // [Hkv]
  const float* v_scale = nullptr;
  int num_tokens = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType kv_dtype = DType::kBF16;  // bf16, fp16, fp8_e5m2 or fp8_e4m3; fp32 from fp32 k, v only
  // int8 and int4 (bf16 k, v; head_dim 64 or 128): each row less its head's mean, rotated by the
  // Walsh-Hadamard transform (times norm = 1 / sqrt(head_dim)), then quantized with its own
  // parameters into row_params (KvLayer::row_params: K's then V's per row pair, fp16), as the
  // CPU backend's kv_store.
  void* row_params = nullptr;
  const float* k_mean = nullptr;  // [Hkv, D]
  const float* v_mean = nullptr;
  float norm = 1.0f;
};
void launch_kv_store(const KvStoreParams& p, cudaStream_t stream);
void launch_kv_store_rotated(const KvStoreParams& p, cudaStream_t stream);
// rope then kv_store in one kernel, for the pools launch_kv_store writes, where
// rope_kv_store_fusable: head_dim a multiple of 16, q, q_out, k and v rows 16-byte aligned.
bool rope_kv_store_fusable(const RopeParams& r, const KvStoreParams& s);
void launch_rope_kv_store(const RopeParams& r, const KvStoreParams& s, cudaStream_t stream);

// out[r] = H x[r] * norm (+ mean[(r % heads) / group]) for bf16 rows of head_dim 64 or 128: q into
// an int8/int4 pool's rotated space, and the attention output back out of it with V's mean.
struct HadamardRowsParams {
  const void* x = nullptr;
  void* out = nullptr;          // may be x
  const float* mean = nullptr;  // optional: [heads / group, head_dim]
  int64_t rows = 0;
  int heads = 1;
  int group = 1;
  int head_dim = 0;
  float norm = 1.0f;
};
void launch_hadamard_rows(const HadamardRowsParams& p, cudaStream_t stream);

// Turns an uploaded batch (`in`: the ForwardBatch's arrays packed one after another) into the fixed
// arrays the step's kernels read (`out`): writes each sequence's new slots into its row of the
// request -> slot table, reads the row's first kv_len slots out as kv_indices (CSR over kv_indptr)
// and its new tokens' slots as out_slots, and copies the other arrays.
struct BatchArrays {
  int32_t* tokens = nullptr;     // [T]
  int32_t* positions = nullptr;  // [T]
  int32_t* qo_indptr = nullptr;  // [B + 1]
  int32_t* kv_indptr = nullptr;  // [B + 1]
  int32_t* work_seq = nullptr;   // [W] the attention plan's prefill work list
  int32_t* work_row0 = nullptr;  // [W]
};
struct BatchUnpackParams {
  BatchArrays in;                            // packed, as uploaded
  const int32_t* req_rows = nullptr;         // [B]
  const int32_t* new_slot_indptr = nullptr;  // [B + 1]
  const int32_t* new_slots = nullptr;
  BatchArrays out;                     // fixed
  int32_t* token_seq = nullptr;        // [T]
  int32_t* last_token_rows = nullptr;  // [B]
  int32_t* out_slots = nullptr;        // [T]
  int32_t* kv_indices = nullptr;       // [kv_indptr[B]]
  int32_t* table = nullptr;            // [rows, row_len]
  int64_t row_len = 0;
  int num_seqs = 0;
  int num_work = 0;
  int max_kv_len = 0;
};
void launch_batch_unpack(const BatchUnpackParams& p, cudaStream_t stream);

}  // namespace serve8
