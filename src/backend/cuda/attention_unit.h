// The CUDA attention unit: the decode and prefill/extend kernels behind one plan() and one run().
// It owns its device workspaces (decode split partials and merge counters), sized once by
// reserve() at start-up, so that a step's attention allocates nothing and waits for nothing.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/attention.h"

namespace serve8 {

// The pool dtypes the tensor-core kernels serve: bf16, fp16, fp8_e5m2, fp8_e4m3, int8, int4.
constexpr int kAttentionPoolDtypes = 6;

class AttentionUnit {
 public:
  AttentionUnit(cudaStream_t stream, int sms, AttentionOptions options);
  ~AttentionUnit();
  AttentionUnit(const AttentionUnit&) = delete;
  AttentionUnit& operator=(const AttentionUnit&) = delete;

  // Sizes the workspaces for decode launches of up to max_seqs sequences of this head geometry,
  // whatever the KV dtype. Start-up only: it may wait for the device; it only grows.
  void reserve(int max_seqs, int num_q_heads, int num_kv_heads, int head_dim);

  struct Plan {
    AttentionShape shape;
    PrefillPlan prefill;
    DecodePlan decode;
  };
  // Host only: the plan of `batch` over a pool of kv_dtype, for the geometry given to reserve().
  // Writes the prefill work list to work_seq/work_row0 (room for max_prefill_work(...) each).
  Plan plan(const ForwardBatch& batch, DType kv_dtype, int32_t* work_seq, int32_t* work_row0) const;

  // Launches the kernels of `plan` for one layer; p holds the tensors and the batch arrays,
  // work_seq/work_row0 the device copy of the plan's work list.
  void run(AttentionParams p, const Plan& plan, const int32_t* work_seq, const int32_t* work_row0) const;

  int num_q_heads() const { return num_q_heads_; }

 private:
  AttentionShape shape_for(DType kv_dtype) const;

  cudaStream_t stream_;
  int sms_;
  AttentionOptions options_;
  int max_seqs_ = 0, num_q_heads_ = 0, num_kv_heads_ = 0, head_dim_ = 0;
  // Decode kernel occupancy per KV dtype (kPoolDtypes) and KV heads a block (1, 2).
  int blocks_per_sm_[kAttentionPoolDtypes][2] = {};
  float* partials_ = nullptr;  // split partials: o, then lse
  size_t partial_floats_ = 0;
  int* counters_ = nullptr;  // one per (sequence, block of KV heads); zero between launches
  size_t num_counters_ = 0;
};

}  // namespace serve8
