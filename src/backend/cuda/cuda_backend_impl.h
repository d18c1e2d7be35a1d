// CudaBackend: the Backend of cuda_backend.h. Device memory is plain cudaMalloc, all work runs on
// one non-blocking stream (a later step captures decode steps of it in CUDA graphs), and the
// batch lives in fixed device buffers that only move when a larger batch needs them to grow.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/op_profiler.h"
#include "backend/cuda/sampler.h"

namespace serve8 {

// A device buffer with a pinned host mirror, grown on demand. Uploads go host mirror → device on
// the stream; an event keeps the mirror from being rewritten while a copy still reads it.
class StagedBuffer {
 public:
  StagedBuffer() = default;
  ~StagedBuffer();
  StagedBuffer(const StagedBuffer&) = delete;
  StagedBuffer& operator=(const StagedBuffer&) = delete;

  // Makes room for `bytes` (device addresses change only when it grows) and waits until the host
  // mirror is free to write.
  void reserve(size_t bytes, cudaStream_t stream);
  char* host() const { return host_; }
  char* device() const { return device_; }
  void upload(size_t bytes, cudaStream_t stream);

 private:
  char* host_ = nullptr;
  char* device_ = nullptr;
  size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(DType compute = DType::kBF16);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  DType compute_dtype() const override { return compute_; }
  std::string device_description() const override;

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  size_t free_memory() const override;
  size_t total_memory() const override;

  std::unique_ptr<KvCache> create_kv_cache(const KvCacheConfig& config, const KvScales& scales) override;
  DeviceBatch upload_batch(const ForwardBatch& batch) override;

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override;
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override;
  void add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out) override;
  void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) override;
  void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) override;
  void kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) override;
  void attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale,
                 Tensor out) override;
  void silu_mul(const Tensor& gate_up, Tensor out) override;
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) override;
  void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids) override;

  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override;
  void set_op_profiling(bool on) override;
  std::vector<OpTime> op_profile() override;

  cudaStream_t stream() const { return stream_; }

 private:
  // Host-side plan of the attention kernels for the current batch and a GQA group.
  struct AttentionPlan {
    uint64_t generation = 0;  // of the batch it was made for; 0: none
    int group = 0;
    int num_work = 0;  // prefill tiles
    bool has_decode = false;
  };
  void check_current_batch(const DeviceBatch& batch, const char* op) const;
  void check_slots(const DeviceBatch& batch, int64_t num_slots, const char* op);
  const AttentionPlan& plan_attention(const DeviceBatch& batch, int group);
  void rmsnorm_impl(const char* op, const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor out);

  DType compute_ = DType::kBF16;  // bf16 or fp32
  int device_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  std::unique_ptr<CudaSampler> sampler_;
  OpProfiler profiler_;

  StagedBuffer batch_buf_;  // the batch's int32 arrays (layout in upload_batch)
  int64_t token_cap_ = 0, seq_cap_ = 0, kv_cap_ = 0;
  uint64_t batch_generation_ = 0;
  const void* batch_tokens_ = nullptr;  // device address of the current batch's tokens
  const int32_t* batch_token_seq_ = nullptr;
  uint64_t slots_checked_generation_ = 0;
  int64_t slots_checked_num_slots_ = 0;

  StagedBuffer plan_buf_;  // prefill work list: work_seq, then work_row0
  AttentionPlan plan_;

  DecodeKernel decode_kernel_ = DecodeKernel::kStream;
  int decode_blocks_per_sm_ = 0;  // SERVE8_CUDA_DECODE_BLOCKS_PER_SM; 0: planned from occupancy
  int decode_min_chunk_ = 0;      // SERVE8_CUDA_DECODE_MIN_CHUNK (and no minimum count); 0: decode_split_rule
  int decode_heads_ = 0;          // SERVE8_CUDA_DECODE_HEADS (FP8 pools, stream kernel); 0: decode_heads_per_block
  PrefillKernel prefill_kernel_ = PrefillKernel::kPipelined;
  float* split_workspace_ = nullptr;  // decode split-KV partials
  size_t split_workspace_bytes_ = 0;
  // How decode splits merge (SERVE8_CUDA_DECODE_MERGE): fused in the stream kernel (its split
  // counters, AttentionParams::split_counters, one per (sequence, block of KV heads)), or the
  // separate merge kernel (the other decode kernels; SERVE8_CUDA_DECODE_MERGE=kernel).
  enum class DecodeMerge { kKernel, kFused };
  DecodeMerge decode_merge_ = DecodeMerge::kFused;
  static constexpr int kSplitCounters = 1 << 16;
  int* split_counters_ = nullptr;
  // The stream decode kernel starts under a programmatic dependent launch (SERVE8_CUDA_PDL=0: a
  // plain launch), as FlashInfer's decode does by default on sm_90.
  bool decode_dependent_launch_ = true;
};

}  // namespace serve8
