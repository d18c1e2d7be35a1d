// A Backend that only holds memory (host calloc/memcpy), for tests of weight loading that must
// not depend on a real backend. Every op throws.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/backend.h"
#include "core/error.h"

namespace serve8::testing {

class HostMemoryBackend : public Backend {
 public:
  explicit HostMemoryBackend(DType compute = DType::kF32) : compute_(compute) {}
  std::string name() const override { return "host-memory"; }
  DType compute_dtype() const override { return compute_; }
  std::string device_description() const override { return "test host memory"; }
  void* alloc(size_t bytes) override {
    ++live_allocations;
    return std::calloc(bytes, 1);
  }
  void free(void* ptr) override {
    --live_allocations;
    std::free(ptr);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    bytes_copied += bytes;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  size_t free_memory() const override { return 0; }
  std::unique_ptr<KvCache> create_kv_cache(const KvCacheConfig&, const KvScales&) override { unsupported(); }
  void reserve_steps(const StepLimits&) override {}  // nothing to size: no step ever runs
  DeviceBatch upload_batch(const ForwardBatch&, KvCache&) override { unsupported(); }
  void embedding(const Tensor&, const Tensor&, Tensor) override { unsupported(); }
  void rmsnorm(const Tensor&, const Tensor&, float, Tensor) override { unsupported(); }
  void add_rmsnorm(const Tensor&, Tensor, const Tensor&, float, Tensor, const Fp8Rows*) override { unsupported(); }
  void gemm(const Tensor&, const Tensor&, const Tensor*, Tensor) override { unsupported(); }
  void quantize_fp8_rows(const Tensor&, Tensor, Tensor) override { unsupported(); }
  void gemm_fp8(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor*, Tensor) override {
    unsupported();
  }
  void rope(Tensor, Tensor, const Tensor&, const Tensor&) override { unsupported(); }
  void kv_store(const Tensor&, const Tensor&, const DeviceBatch&, const KvLayer&) override { unsupported(); }
  void rope_kv_store(Tensor, Tensor, const Tensor&, const Tensor&, const DeviceBatch&, const KvLayer&) override {
    unsupported();
  }
  void attention(const Tensor&, const KvLayer&, const DeviceBatch&, float, Tensor) override { unsupported(); }
  void silu_mul(const Tensor&, Tensor, const Fp8Rows*) override { unsupported(); }
  void gather_rows(const Tensor&, const Tensor&, Tensor) override { unsupported(); }
  void sample(const Tensor&, const std::vector<SamplingRow>&, int32_t*) override { unsupported(); }
  void edit_logits(Tensor, std::span<const LogitEdit>) override { unsupported(); }
  void mask_logits(Tensor, std::span<const int32_t>, std::span<const int32_t>) override { unsupported(); }
  std::vector<RowLogprobs> logprobs(const Tensor&, std::span<const int32_t>, std::span<const int32_t>, int) override {
    unsupported();
    return {};
  }

  int live_allocations = 0;
  size_t bytes_copied = 0;

 private:
  [[noreturn]] static void unsupported() { throw Error("HostMemoryBackend has no ops"); }
  DType compute_;
};

}  // namespace serve8::testing
