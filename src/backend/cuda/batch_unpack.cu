// batch_unpack: the device side of upload_batch. One block per (sequence, 1,024 of its KV
// positions): no block waits for another, since a position's slot comes either from the table (old
// positions) or from the batch's new slots (which the same thread writes into the table).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"

namespace serve8 {
namespace {

constexpr int kUnpackThreads = 256;
constexpr int kUnpackChunk = 1024;  // KV positions per block

__global__ void __launch_bounds__(kUnpackThreads) batch_unpack_kernel(const BatchUnpackParams p) {
  const int b = blockIdx.x;
  const int q0 = p.in.qo_indptr[b], q1 = p.in.qo_indptr[b + 1];
  const int kv0 = p.in.kv_indptr[b], kv_len = p.in.kv_indptr[b + 1] - kv0;
  const int s0 = p.new_slot_indptr[b], n_new = p.new_slot_indptr[b + 1] - s0;
  const int first_new = kv_len - n_new, first_q = kv_len - (q1 - q0);
  int32_t* row = p.table + p.row_len * p.req_rows[b];
  const int end = min(kv_len, (blockIdx.y + 1) * kUnpackChunk);
  for (int pos = blockIdx.y * kUnpackChunk + threadIdx.x; pos < end; pos += kUnpackThreads) {
    int32_t slot;
    if (pos >= first_new) {
      slot = p.new_slots[s0 + pos - first_new];
      row[pos] = slot;
    } else {
      slot = row[pos];
    }
    p.kv_indices[kv0 + pos] = slot;
    if (pos >= first_q) {
      const int t = q0 + pos - first_q;
      p.out_slots[t] = slot;
      p.out.tokens[t] = p.in.tokens[t];
      p.out.positions[t] = p.in.positions[t];
      p.token_seq[t] = b;
    }
  }
  if (blockIdx.y != 0) return;
  if (threadIdx.x == 0) {
    p.out.qo_indptr[b] = q0;
    p.out.kv_indptr[b] = kv0;
    p.last_token_rows[b] = q1 - 1;
    if (b + 1 == p.num_seqs) {
      p.out.qo_indptr[b + 1] = q1;
      p.out.kv_indptr[b + 1] = kv0 + kv_len;
    }
  }
  for (int i = b * kUnpackThreads + threadIdx.x; i < p.num_work; i += p.num_seqs * kUnpackThreads) {
    p.out.work_seq[i] = p.in.work_seq[i];
    p.out.work_row0[i] = p.in.work_row0[i];
  }
}

}  // namespace

void launch_batch_unpack(const BatchUnpackParams& p, cudaStream_t stream) {
  if (p.num_seqs == 0) return;
  const dim3 grid(p.num_seqs, ceil_div(p.max_kv_len > 0 ? p.max_kv_len : 1, kUnpackChunk));
  batch_unpack_kernel<<<grid, kUnpackThreads, 0, stream>>>(p);
  SERVE8_CUDA_CHECK_LAUNCH("batch_unpack_kernel");
}

}  // namespace serve8
