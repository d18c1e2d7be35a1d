#include "backend/cuda/attention_unit.h"

#include <algorithm>
#include <span>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace serve8 {
namespace {

constexpr DType kPoolDtypes[kAttentionPoolDtypes] = {DType::kBF16,    DType::kF16, DType::kFP8E5M2,
                                                     DType::kFP8E4M3, DType::kI8,  DType::kI4};

int pool_dtype_index(DType t) {
  for (int i = 0; i < kAttentionPoolDtypes; ++i)
    if (kPoolDtypes[i] == t) return i;
  return -1;
}

}  // namespace

AttentionUnit::AttentionUnit(cudaStream_t stream, int sms, AttentionOptions options)
    : stream_(stream), sms_(sms), options_(options) {
  SERVE8_CHECK(options.decode_heads >= 0 && options.decode_heads <= 2 && options.decode_min_chunk >= 0,
               "attention: decode_heads {} (expected 0, 1 or 2) and decode_min_chunk {} (expected >= 0)",
               options.decode_heads, options.decode_min_chunk);
}

AttentionUnit::~AttentionUnit() {
  if (partials_) cudaFree(partials_);
  if (counters_) cudaFree(counters_);
}

AttentionShape AttentionUnit::shape_for(DType kv_dtype) const {
  AttentionShape s;
  s.num_q_heads = num_q_heads_;
  s.num_kv_heads = num_kv_heads_;
  s.head_dim = head_dim_;
  s.kv_dtype = kv_dtype;
  s.sms = sms_;
  const int i = pool_dtype_index(kv_dtype);
  if (i >= 0) std::copy_n(blocks_per_sm_[i], 2, s.blocks_per_sm);
  return s;
}

void AttentionUnit::reserve(int max_seqs, int num_q_heads, int num_kv_heads, int head_dim) {
  SERVE8_CHECK(max_seqs > 0 && num_kv_heads > 0 && num_q_heads % num_kv_heads == 0 && head_dim > 0,
               "attention: cannot reserve for {} sequences of {} q heads over {} kv heads, head_dim {}", max_seqs,
               num_q_heads, num_kv_heads, head_dim);
  max_seqs_ = std::max(max_seqs_, max_seqs);
  num_q_heads_ = num_q_heads;
  num_kv_heads_ = num_kv_heads;
  head_dim_ = head_dim;
  if (!attention_fast_path(head_dim, num_q_heads / num_kv_heads)) return;  // the generic kernel needs nothing
  for (int i = 0; i < kAttentionPoolDtypes; ++i) {
    for (int h = 1; h <= 2; ++h) blocks_per_sm_[i][h - 1] = decode_blocks_per_sm(kPoolDtypes[i], head_dim, h);
  }
  size_t floats = 0;
  for (DType t : kPoolDtypes) {
    const AttentionShape s = shape_for(t);
    for (int b = 1; b <= max_seqs_; ++b) floats = std::max(floats, plan_decode(b, s, options_).partial_floats(b, s));
  }
  const size_t counters = static_cast<size_t>(max_seqs_) * static_cast<size_t>(num_kv_heads);
  if (floats <= partial_floats_ && counters <= num_counters_) return;
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued launches may still use the old ones
  if (floats > partial_floats_) {
    if (partials_) SERVE8_CUDA_CHECK(cudaFree(partials_));
    partials_ = nullptr;
    SERVE8_CUDA_CHECK(cudaMalloc(&partials_, std::max<size_t>(floats, 1) * sizeof(float)));
    partial_floats_ = floats;
  }
  if (counters > num_counters_) {
    if (counters_) SERVE8_CUDA_CHECK(cudaFree(counters_));
    counters_ = nullptr;
    SERVE8_CUDA_CHECK(cudaMalloc(&counters_, counters * sizeof(int)));
    // On the unit's stream (non-blocking: it would not wait for a default-stream memset).
    SERVE8_CUDA_CHECK(cudaMemsetAsync(counters_, 0, counters * sizeof(int), stream_));
    num_counters_ = counters;
  }
}

AttentionUnit::Plan AttentionUnit::plan(const ForwardBatch& batch, DType kv_dtype, int32_t* work_seq,
                                        int32_t* work_row0) const {
  Plan p;
  p.shape = shape_for(kv_dtype);
  if (num_q_heads_ == 0 || !attention_fast_path(head_dim_, p.shape.group())) return p;
  p.prefill = plan_prefill(batch.qo_indptr, batch.kv_indptr, p.shape.group(), work_seq, work_row0);
  if (p.prefill.has_decode) p.decode = plan_decode(batch.num_seqs(), p.shape, options_);
  return p;
}

void AttentionUnit::run(AttentionParams p, const Plan& plan, const int32_t* work_seq, const int32_t* work_row0) const {
  const DType kv = plan.shape.kv_dtype;
  if (plan.prefill.num_work > 0) {
    p.work_seq = work_seq;
    p.work_row0 = work_row0;
    p.num_work = plan.prefill.num_work;
    launch_attention_prefill(p, kv, stream_);
  }
  if (!plan.prefill.has_decode) return;
  const DecodePlan& d = plan.decode;
  p.decode_heads = d.heads_per_block;
  p.num_splits = d.num_splits;
  p.split_min_chunk = d.min_chunk;
  p.split_min_count = d.min_count;
  if (d.num_splits > 1) {
    const size_t floats = d.partial_floats(p.num_seqs, plan.shape);
    const size_t counters = static_cast<size_t>(p.num_seqs) * static_cast<size_t>(d.head_blocks(plan.shape));
    SERVE8_CHECK(floats <= partial_floats_ && counters <= num_counters_,
                 "attention: a decode launch of {} sequences needs more workspace than reserved for {}", p.num_seqs,
                 max_seqs_);
    const size_t rows = floats / static_cast<size_t>(p.head_dim + 1);
    p.partial_o = partials_;
    p.partial_lse = partials_ + rows * static_cast<size_t>(p.head_dim);
    p.split_counters = counters_;
  }
  launch_attention_decode(p, kv, stream_);
}

}  // namespace serve8
