// CudaBackend: the Backend of cuda_backend.h. Device memory is plain cudaMalloc, all work runs on
// one non-blocking stream (decode steps of it are captured in CUDA graphs), and the batch lives in
// fixed device buffers sized at start-up (reserve_steps, create_kv_cache), so they never move.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention_unit.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_choices.h"
#include "backend/cuda/kernel_trace.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_profiler.h"
#include "backend/cuda/sampler.h"
#include "backend/cuda/skinny_gemm.h"

namespace serve8 {

// A device buffer with a pinned host mirror. Uploads go host mirror -> device on the stream; an
// event keeps the mirror from being rewritten while a copy still reads it.
class StagedBuffer {
 public:
  StagedBuffer() = default;
  ~StagedBuffer();
  StagedBuffer(const StagedBuffer&) = delete;
  StagedBuffer& operator=(const StagedBuffer&) = delete;

  // Start-up only: makes room for `bytes` (it may wait for the device; it only grows).
  void reserve(size_t bytes, cudaStream_t stream);
  // Waits until the host mirror is free to write (the previous upload's copy has run).
  char* host();
  char* device() const { return device_; }
  size_t capacity() const { return capacity_; }
  void upload(size_t bytes, cudaStream_t stream);

 private:
  char* host_ = nullptr;
  char* device_ = nullptr;
  size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  // device: the GPU's index (-1: the calling thread's current device).
  explicit CudaBackend(DType compute = DType::kBF16, AttentionOptions options = {}, int device = -1);
  ~CudaBackend() override;

  int device() const { return device_; }
  // Makes this backend's GPU the calling thread's current device. Every public entry point calls it: a
  // tensor-parallel process drives one backend per GPU, and its main thread loads them all.
  void on_device() const noexcept;

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
  void reserve_steps(const StepLimits& limits) override;
  DeviceBatch upload_batch(const ForwardBatch& batch, KvCache& kv) override;

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override;
  void embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out) override;
  // NCCL communicators over GPUs 0..n-1 (each rank's backend made with that device).
  std::vector<std::unique_ptr<Communicator>> create_communicators(int n, int64_t max_reduce_elems) override;
  void check_communicators(int n) const override;
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override;
  void add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out,
                   const Fp8Rows* fp8 = nullptr) override;
  void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) override;
  void quantize_fp8_rows(const Tensor& x, Tensor q, Tensor scale) override;
  void gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                Tensor out) override;
  void gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                        Tensor out) override;
  bool has_gemm_fp8_weights() const override { return true; }
  void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) override;
  void kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) override;
  void rope_kv_store(Tensor qkv, Tensor q, const Tensor& positions, const Tensor& inv_freq, const DeviceBatch& batch,
                     const KvLayer& kv) override;
  void attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale,
                 Tensor out) override;
  void silu_mul(const Tensor& gate_up, Tensor out, const Fp8Rows* fp8 = nullptr) override;
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) override;
  void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids) override;
  void edit_logits(Tensor logits, std::span<const LogitEdit> edits) override;
  void mask_logits(Tensor logits, std::span<const int32_t> rows, std::span<const int32_t> allowed) override;
  std::vector<RowLogprobs> logprobs(const Tensor& logits, std::span<const int32_t> rows,
                                    std::span<const int32_t> chosen, int top_n) override;

  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override;
  void set_op_profiling(bool on) override;
  std::vector<OpTime> op_profile() override;
  void set_kernel_tracing(bool on) override;
  std::vector<KernelSpan> kernel_trace() override;

  void set_gemm_tuning(GemmTuning mode) override;
  void begin_gemm_tuning() override;
  std::vector<GemmTiming> end_gemm_tuning() override;

  cudaStream_t stream() const { return stream_; }

 private:
  void check_current_batch(const DeviceBatch& batch, const char* op) const;
  // The checked arguments of rope and kv_store, for them and for rope_kv_store.
  RopeParams rope_params(const char* op, Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) const;
  KvStoreParams kv_store_params(const char* op, const Tensor& k, const Tensor& v, const DeviceBatch& batch,
                                const KvLayer& kv) const;
  // Sizes the fixed batch arrays for limits_ and KV caches of up to kv_capacity_ KV entries a step.
  void reserve_batch_arrays();
  // Sizes rotated_q_ for limits_ once an int8/int4 pool exists (q rotated into their space).
  void reserve_rotation();
  void rmsnorm_impl(const char* op, const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor out,
                    const Fp8Rows* fp8);

  DType compute_ = DType::kBF16;  // bf16 or fp32
  int device_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  std::unique_ptr<SkinnyGemm> skinny_;
  // This GPU's entries of the measured table (the first table_choices_), then those timed here.
  std::vector<Fp8GemmChoice> fp8_choices_;
  size_t table_choices_ = 0;
  // The GEMM calls of a warm-up step (gemm_tuning.cpp): each both ways, for end_gemm_tuning.
  struct NotedGemm {
    bool fp8 = false;
    SkinnyGemmArgs ours;
    GemmArgs library;
  };
  void note_gemm(bool fp8, const SkinnyGemmArgs& ours, const GemmArgs& library) {
    noted_gemms_.push_back({fp8, ours, library});
  }
  // Per launch, us: the calls back to back in one graph, the median of a few replays.
  double time_gemms_us(const std::vector<const NotedGemm*>& calls, bool library);
  GemmTuning gemm_tuning_ = GemmTuning::kAuto;
  bool noting_gemms_ = false;
  std::vector<NotedGemm> noted_gemms_;
  std::unique_ptr<CudaSampler> sampler_;
  std::unique_ptr<AttentionUnit> attention_;
  OpProfiler profiler_;
  KernelTrace trace_;

  StepLimits limits_;
  int64_t kv_capacity_ = 0;    // KV entries (sum of kv_len) a step may have: the largest KV cache's table
  StagedBuffer staged_;        // the ForwardBatch's arrays, packed, as uploaded
  int32_t* arrays_ = nullptr;  // the fixed arrays the kernels read (layout in reserve_batch_arrays)
  // Weight-only FP8: the largest matrix widened to the compute dtype for GEMMs of more than 64 rows (prefill).
  void* widened_ = nullptr;
  int64_t widened_elems_ = 0;
  BatchUnpackParams fixed_;  // their addresses
  uint64_t batch_generation_ = 0;
  const void* batch_tokens_ = nullptr;         // device address of the current batch's tokens
  AttentionUnit::Plan plan_;                   // of the current batch
  std::vector<int32_t> work_seq_, work_row0_;  // its prefill work list, on the host
  bool rotated_pool_ = false;                  // an int8/int4 KV cache was made
  void* rotated_q_ = nullptr;                  // [max_tokens, Hq, D] bf16: q rotated for it
  size_t rotated_q_bytes_ = 0;
};

}  // namespace serve8
