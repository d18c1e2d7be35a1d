// The CPU ops as free functions, one per Backend op (semantics in backend/backend.h). CpuBackend
// forwards to them; they are split over cpu_dense.cpp, cpu_fp8.cpp, cpu_attention.cpp and
// cpu_sampling.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace serve8::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor out);
void embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out);
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out);
void add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out);
void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);
void quantize_fp8_rows(const Tensor& x, Tensor q, Tensor scale);
void gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
              Tensor out);
void gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias, Tensor out);
void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq);
void silu_mul(const Tensor& gate_up, Tensor out);
void gather_rows(const Tensor& x, const Tensor& rows, Tensor out);

void kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv);
void rope_kv_store(Tensor qkv, Tensor q, const Tensor& positions, const Tensor& inv_freq, const DeviceBatch& batch,
                   const KvLayer& kv);
void attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale, Tensor out);

void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids);
void edit_logits(Tensor logits, std::span<const LogitEdit> edits);
void mask_logits(Tensor logits, std::span<const int32_t> rows, std::span<const int32_t> allowed);

}  // namespace serve8::cpu
