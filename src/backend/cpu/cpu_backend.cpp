// The CPU backend object: host memory, the KV pool, batch "upload" (views of the host arrays) and
// the forwarding of every op to the free functions of cpu_ops.h. Ops run synchronously on the
// calling thread, using OpenMP inside.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_communicator.h"
#include "backend/cpu/cpu_ops.h"

namespace serve8::cpu {

namespace {

constexpr size_t kAlignment = 64;

// Zero-filled, 64-byte aligned host memory. Large blocks (a KV pool of gigabytes) are zeroed by
// all threads.
void* host_alloc_zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  SERVE8_CHECK(p != nullptr, "cpu: out of host memory allocating {} bytes", bytes);
  constexpr size_t kChunk = size_t{1} << 22;
  const int64_t chunks = static_cast<int64_t>((rounded + kChunk - 1) / kChunk);
  char* c = static_cast<char*>(p);
#pragma omp parallel for schedule(static) if (chunks > 16)
  for (int64_t i = 0; i < chunks; ++i) {
    const size_t begin = static_cast<size_t>(i) * kChunk;
    std::memset(c + begin, 0, std::min(kChunk, rounded - begin));
  }
  return p;
}

struct HostFree {
  void operator()(void* p) const { std::free(p); }
};
using HostBytes = std::unique_ptr<void, HostFree>;

bool kv_dtype_supported(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kI8:
    case DType::kI4:
      return true;
    case DType::kI32:
      return false;
  }
  return false;
}

class CpuKvCache final : public KvCache {
 public:
  CpuKvCache(const KvCacheConfig& config, const KvScales& scales) : config_(config) {
    SERVE8_CHECK(kv_dtype_supported(config.dtype),
                 "kv cache: storage dtype {} is not supported (expected fp32, bf16, fp16, fp8_e5m2, fp8_e4m3, int8 or "
                 "int4)",
                 dtype_name(config.dtype));
    rotated_ = kv_dtype_is_rotated(config.dtype);
    SERVE8_CHECK(!rotated_ || (config.head_dim & (config.head_dim - 1)) == 0,
                 "kv cache: {} rotates each head by a Walsh-Hadamard transform, which needs a power-of-two "
                 "head_dim (this model's is {})",
                 dtype_name(config.dtype), config.head_dim);
    set_scales(scales);  // checks the geometry and scales first
    const size_t rows =
        static_cast<size_t>(kv_storage_slots(config.num_slots)) * static_cast<size_t>(config.num_kv_heads);
    const size_t layer_bytes =
        rows * static_cast<size_t>(kv_pool_width(config.dtype, config.head_dim)) * dtype_size(config.dtype);
    const size_t row_param_bytes = rows * 2 * static_cast<size_t>(kv_row_param_bytes(config.dtype));  // K's, V's
    for (int i = 0; i < config.num_layers; ++i) {
      k_.emplace_back(host_alloc_zeroed(layer_bytes));
      v_.emplace_back(host_alloc_zeroed(layer_bytes));
      if (rotated_) row_params_.emplace_back(host_alloc_zeroed(row_param_bytes));
    }
    SERVE8_CHECK(config.max_requests > 0 && config.max_context_len > 0,
                 "kv cache: the request table needs rows and a context length ({} x {})", config.max_requests,
                 config.max_context_len);
    table_.assign(static_cast<size_t>(config.max_requests + 1) * static_cast<size_t>(config.max_context_len), 0);
  }

  const KvCacheConfig& config() const override { return config_; }
  Tensor req_to_token() const override {
    return Tensor(const_cast<int32_t*>(table_.data()), DType::kI32,
                  {config_.max_requests + 1, config_.max_context_len});
  }

  KvLayer layer(int i) const override {
    SERVE8_CHECK(i >= 0 && i < config_.num_layers, "kv cache: layer {} out of range (the cache has {} layers)", i,
                 config_.num_layers);
    const auto li = static_cast<size_t>(i);
    const int64_t heads = config_.num_kv_heads;
    const size_t off = li * static_cast<size_t>(heads);
    KvLayer l;
    const int64_t width = kv_pool_width(config_.dtype, config_.head_dim);
    const int64_t pages = kv_storage_slots(config_.num_slots) / kKvPageSize;
    l.k = Tensor(k_[li].get(), config_.dtype, {pages, heads, kKvPageSize, width});
    l.v = Tensor(v_[li].get(), config_.dtype, {pages, heads, kKvPageSize, width});
    // The views point into scales_, which set_scales overwrites in place: a held KvLayer sees new scales.
    l.k_scale = Tensor(const_cast<float*>(scales_.k.data() + off), DType::kF32, {heads});
    l.v_scale = Tensor(const_cast<float*>(scales_.v.data() + off), DType::kF32, {heads});
    if (rotated_) {
      l.row_params =
          Tensor(row_params_[li].get(), DType::kF16, {pages, heads, kKvPageSize, kv_row_param_bytes(config_.dtype)});
      const size_t at = off * static_cast<size_t>(config_.head_dim);
      l.k_mean = Tensor(const_cast<float*>(scales_.k_mean.data() + at), DType::kF32, {heads, config_.head_dim});
      l.v_mean = Tensor(const_cast<float*>(scales_.v_mean.data() + at), DType::kF32, {heads, config_.head_dim});
    }
    return l;
  }

  void set_scales(const KvScales& scales) override {
    check_kv_cache_args(config_, scales);
    // In place (sized on first use), so that held KvLayer views see the new values.
    const size_t means = rotated_ ? scales.k.size() * static_cast<size_t>(config_.head_dim) : 0;
    if (scales_.k.empty()) {
      scales_.k.resize(scales.k.size());
      scales_.v.resize(scales.v.size());
      scales_.k_mean.resize(means);
      scales_.v_mean.resize(means);
    }
    std::copy(scales.k.begin(), scales.k.end(), scales_.k.begin());
    std::copy(scales.v.begin(), scales.v.end(), scales_.v.begin());
    for (auto [src, dst] : {std::pair{&scales.k_mean, &scales_.k_mean}, std::pair{&scales.v_mean, &scales_.v_mean}}) {
      if (src->empty() || !rotated_)
        std::fill(dst->begin(), dst->end(), 0.0f);
      else
        std::copy(src->begin(), src->end(), dst->begin());
    }
  }

 private:
  KvCacheConfig config_;
  KvScales scales_;
  std::vector<HostBytes> k_, v_;
  std::vector<HostBytes> row_params_;  // int8 and int4: each row's scale (and minimum), K's and V's
  bool rotated_ = false;
  std::vector<int32_t> table_;
};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// A /proc/meminfo field in bytes, else sysconf(pages_name) pages, else 0.
size_t meminfo_bytes(std::string_view field, int pages_name) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long kib = 0;
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':' &&
        std::sscanf(line.c_str() + field.size() + 1, "%llu", &kib) == 1) {
      return static_cast<size_t>(kib) * 1024;
    }
  }
  const long pages = sysconf(pages_name);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::kF32; }
  std::string device_description() const override {
    return fmt::format("{}, {} OpenMP threads, {}", cpu_model_name(), omp_get_max_threads(), openblas_get_config());
  }

  void* alloc(size_t bytes) override { return host_alloc_zeroed(bytes); }
  void free(void* ptr) override { std::free(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  // MemAvailable counts reclaimable page cache (mmapped weights among it), which sysconf's free
  // pages do not; sysconf is the fallback where /proc is missing.
  size_t free_memory() const override { return meminfo_bytes("MemAvailable", _SC_AVPHYS_PAGES); }
  size_t total_memory() const override { return meminfo_bytes("MemTotal", _SC_PHYS_PAGES); }

  std::unique_ptr<KvCache> create_kv_cache(const KvCacheConfig& config, const KvScales& scales) override {
    return std::make_unique<CpuKvCache>(config, scales);
  }

  void reserve_steps(const StepLimits& limits) override { (void)limits; }

  // The "device" arrays are the ForwardBatch's own vectors where they exist; the table update and
  // the arrays made from it go into storage that stays valid until the next upload (as the fixed
  // buffers of the CUDA backend).
  DeviceBatch upload_batch(const ForwardBatch& batch, KvCache& kv) override {
    batch.validate();
    const KvCacheConfig& c = kv.config();
    check_batch_fits(batch, c);
    const auto view = [](const std::vector<int32_t>& v) {
      return Tensor(const_cast<int32_t*>(v.data()), DType::kI32, {static_cast<int64_t>(v.size())});
    };
    int32_t* table = kv.req_to_token().ptr<int32_t>();
    const int n = batch.num_seqs();
    out_slots_.clear();
    kv_indices_.clear();
    last_token_rows_.resize(static_cast<size_t>(n));
    DeviceBatch d;
    for (int b = 0; b < n; ++b) {
      const auto bi = static_cast<size_t>(b);
      const int q = batch.qo_indptr[bi + 1] - batch.qo_indptr[bi];
      const int kv_len = batch.kv_indptr[bi + 1] - batch.kv_indptr[bi];
      const int32_t s0 = batch.new_slot_indptr[bi], s1 = batch.new_slot_indptr[bi + 1];
      int32_t* row = table + static_cast<size_t>(batch.req_rows[bi]) * static_cast<size_t>(c.max_context_len);
      std::copy(batch.new_slots.begin() + s0, batch.new_slots.begin() + s1, row + kv_len - (s1 - s0));
      kv_indices_.insert(kv_indices_.end(), row, row + kv_len);
      out_slots_.insert(out_slots_.end(), row + kv_len - q, row + kv_len);
      last_token_rows_[bi] = batch.qo_indptr[bi + 1] - 1;
      d.max_q_len = std::max(d.max_q_len, q);
      d.max_kv_len = std::max(d.max_kv_len, kv_len);
    }
    d.host = &batch;
    d.tokens = view(batch.tokens);
    d.positions = view(batch.positions);
    d.out_slots = view(out_slots_);
    d.qo_indptr = view(batch.qo_indptr);
    d.kv_indptr = view(batch.kv_indptr);
    d.kv_indices = view(kv_indices_);
    d.num_seqs = n;
    d.num_tokens = batch.num_tokens();
    d.last_token_rows = view(last_token_rows_);
    return d;
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override { cpu::embedding(table, ids, out); }
  void embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out) override {
    cpu::embedding_shard(table, ids, first_id, out);
  }
  // Ranks are threads of this process (one CpuBackend each), so they exchange buffers in memory.
  std::vector<std::unique_ptr<Communicator>> create_communicators(int n, int64_t max_reduce_elems) override {
    return make_in_process_communicators(n, max_reduce_elems);
  }
  void check_communicators(int n) const override { (void)n; }
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    cpu::rmsnorm(x, weight, eps, out);
  }
  void add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out,
                   const Fp8Rows* fp8 = nullptr) override {
    cpu::add_rmsnorm(x, residual, weight, eps, out);
    if (fp8) cpu::quantize_fp8_rows(out, fp8->q, fp8->scale);
  }
  void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) override { cpu::gemm(x, w, bias, out); }
  void quantize_fp8_rows(const Tensor& x, Tensor q, Tensor scale) override { cpu::quantize_fp8_rows(x, q, scale); }
  void gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                Tensor out) override {
    cpu::gemm_fp8(xq, x_scale, wq, w_scale, bias, out);
  }
  void gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                        Tensor out) override {
    cpu::gemm_fp8_weights(x, wq, w_scale, bias, out);
  }
  bool has_gemm_fp8_weights() const override { return true; }
  void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) override {
    cpu::rope(q, k, positions, inv_freq);
  }
  void kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) override {
    cpu::kv_store(k, v, batch, kv);
  }
  void rope_kv_store(Tensor qkv, Tensor q, const Tensor& positions, const Tensor& inv_freq, const DeviceBatch& batch,
                     const KvLayer& kv) override {
    cpu::rope_kv_store(qkv, q, positions, inv_freq, batch, kv);
  }
  void attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale,
                 Tensor out) override {
    cpu::attention(q, kv, batch, softmax_scale, out);
  }
  void silu_mul(const Tensor& gate_up, Tensor out, const Fp8Rows* fp8 = nullptr) override {
    cpu::silu_mul(gate_up, out);
    if (fp8) cpu::quantize_fp8_rows(out, fp8->q, fp8->scale);
  }
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) override { cpu::gather_rows(x, rows, out); }
  void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids) override {
    cpu::sample(logits, rows, out_ids);
  }
  void edit_logits(Tensor logits, std::span<const LogitEdit> edits) override { cpu::edit_logits(logits, edits); }
  void mask_logits(Tensor logits, std::span<const int32_t> rows, std::span<const int32_t> allowed) override {
    cpu::mask_logits(logits, rows, allowed);
  }
  std::vector<RowLogprobs> logprobs(const Tensor& logits, std::span<const int32_t> rows,
                                    std::span<const int32_t> chosen, int top_n) override {
    SERVE8_CHECK(logits.dtype == DType::kF32 && logits.ndim == 2 && rows.size() == chosen.size(),
                 "logprobs: logits {} {} for {} rows and {} tokens", dtype_name(logits.dtype), logits.shape_str(),
                 rows.size(), chosen.size());
    std::vector<RowLogprobs> out;
    for (size_t i = 0; i < rows.size(); ++i) {
      SERVE8_CHECK(rows[i] >= 0 && rows[i] < logits.dim(0), "logprobs: row {} of logits {}", rows[i],
                   logits.shape_str());
      out.push_back(row_logprobs(logits.ptr<const float>() + rows[i] * logits.dim(1), logits.dim(1), chosen[i], top_n));
    }
    return out;
  }

 private:
  std::vector<int32_t> last_token_rows_, out_slots_, kv_indices_;
};

}  // namespace

}  // namespace serve8::cpu

namespace serve8 {

std::unique_ptr<Backend> create_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace serve8
