// The CUDA backend object: memory, the KV pool, and the dense ops' entry points (checks, then one
// launch). Batch upload and attention live in cuda_attention_ops.cpp.
#include "backend/cuda/cuda_backend.h"

#include <cmath>
#include <string>
#include <utility>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#ifdef SERVE8_HAVE_NCCL
#include "backend/cuda/nccl_communicator.h"
#endif
#include "backend/cuda/op_checks.h"
#include "backend/cuda/sample_select.h"
#include "core/error.h"

namespace serve8 {
namespace {

using cuda_ops::check_activation;
using cuda_ops::check_dtype;
using cuda_ops::check_fp8_rows;
using cuda_ops::check_present;
using cuda_ops::rows_of;
using cuda_ops::to_int;

// The pool dtypes and head dims the kernels serve with the backend's compute dtype, checked when
// the pool is made so that an unsupported model fails at start-up, not at its first step.
void check_kv_config(const KvCacheConfig& c, DType compute) {
  switch (c.dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
      break;
    case DType::kF32:
      SERVE8_CHECK(compute == DType::kF32,
                   "kv cache: fp32 storage needs fp32 compute (--dtype float32); this backend computes in {}",
                   dtype_name(compute));
      break;
    case DType::kI8:
    case DType::kI4:
      SERVE8_CHECK(compute == DType::kBF16 && (c.head_dim == 64 || c.head_dim == 128),
                   "kv cache: {} on CUDA needs bf16 compute and head_dim 64 or 128 (the tensor-core kernels), but "
                   "this model computes in {} with head_dim {}",
                   dtype_name(c.dtype), dtype_name(compute), c.head_dim);
      break;
    case DType::kI32:
      fail(
          "kv cache: storage dtype {} is not supported on CUDA (expected bf16, fp16, fp8_e5m2, fp8_e4m3, int8 or "
          "int4, or fp32 with --dtype float32)",
          dtype_name(c.dtype));
  }
  SERVE8_CHECK(compute != DType::kF32 || attention_fp32_path(c.head_dim, 1),
               "kv cache: fp32 compute (--dtype float32) on CUDA supports head dims 8, 16, 32, 64 and 128 only (the "
               "generic attention kernel; the tensor-core kernels are bf16), but head_dim is {}: use --dtype bfloat16",
               c.head_dim);
}

// The pool: one allocation holding every layer's K and V ([pages, Hkv, page, width] each, in the
// storage dtype; kv_layout.h), for int8/int4 every layer's row parameters (K's and V's per row
// pair, in the rows' order: KvLayer::row_params), then
// the K scales and the V scales ([layers * Hkv] fp32 each), and for int8/int4 the K and V means
// ([layers * Hkv * D] fp32 each).
class CudaKvCache final : public KvCache {
 public:
  CudaKvCache(CudaBackend& backend, const KvCacheConfig& config, const KvScales& scales)
      : backend_(backend), config_(config), rotated_(kv_dtype_is_rotated(config.dtype)) {
    check_kv_config(config, backend.compute_dtype());
    check_kv_cache_args(config, scales);
    const auto layers = static_cast<size_t>(config.num_layers);
    const size_t rows =
        static_cast<size_t>(kv_storage_slots(config.num_slots)) * static_cast<size_t>(config.num_kv_heads);
    SERVE8_CHECK(rows < (size_t{1} << 31), "kv cache: {} slots x {} KV heads pass the 2^31 rows the kernels index",
                 config.num_slots, config.num_kv_heads);
    const size_t width = static_cast<size_t>(kv_pool_width(config.dtype, config.head_dim));
    layer_bytes_ = (rows * width * dtype_size(config.dtype) + 255) / 256 * 256;
    row_param_bytes_ = (rows * 2 * static_cast<size_t>(kv_row_param_bytes(config.dtype)) + 255) / 256 * 256;
    const size_t scale_count = layers * static_cast<size_t>(config.num_kv_heads);
    const size_t mean_count = rotated_ ? scale_count * static_cast<size_t>(config.head_dim) : 0;
    const size_t pools = (2 * layer_bytes_ + row_param_bytes_) * layers;
    const size_t bytes = pools + 2 * (scale_count + mean_count) * sizeof(float);
    base_ = static_cast<char*>(backend_.alloc(bytes));
    scales_ = reinterpret_cast<float*>(base_ + pools);
    means_ = scales_ + 2 * scale_count;
    set_scales(scales);
    SERVE8_CHECK(config.max_requests > 0 && config.max_context_len > 0,
                 "kv cache: the request table needs rows and a context length ({} x {})", config.max_requests,
                 config.max_context_len);
    table_ = static_cast<int32_t*>(backend_.alloc(table_entries(config) * sizeof(int32_t)));
  }
  ~CudaKvCache() override {
    backend_.free(table_);
    backend_.free(base_);
  }

  static size_t table_entries(const KvCacheConfig& c) {
    return static_cast<size_t>(c.max_requests + 1) * static_cast<size_t>(c.max_context_len);
  }

  const KvCacheConfig& config() const override { return config_; }
  Tensor req_to_token() const override {
    return Tensor(table_, DType::kI32, {config_.max_requests + 1, config_.max_context_len});
  }

  KvLayer layer(int i) const override {
    SERVE8_CHECK(i >= 0 && i < config_.num_layers, "kv cache: layer {} out of range (the cache has {} layers)", i,
                 config_.num_layers);
    const auto li = static_cast<size_t>(i);
    const int64_t heads = config_.num_kv_heads;
    const size_t scale_count = static_cast<size_t>(config_.num_layers) * static_cast<size_t>(heads);
    KvLayer l;
    const int64_t width = kv_pool_width(config_.dtype, config_.head_dim);
    const int64_t pages = kv_storage_slots(config_.num_slots) / kKvPageSize;
    l.k = Tensor(base_ + 2 * li * layer_bytes_, config_.dtype, {pages, heads, kKvPageSize, width});
    l.v = Tensor(base_ + (2 * li + 1) * layer_bytes_, config_.dtype, {pages, heads, kKvPageSize, width});
    l.k_scale = Tensor(scales_ + li * static_cast<size_t>(heads), DType::kF32, {heads});
    l.v_scale = Tensor(scales_ + scale_count + li * static_cast<size_t>(heads), DType::kF32, {heads});
    if (rotated_) {
      char* rows = base_ + 2 * static_cast<size_t>(config_.num_layers) * layer_bytes_ + li * row_param_bytes_;
      l.row_params = Tensor(rows, DType::kF16, {pages, heads, kKvPageSize, kv_row_param_bytes(config_.dtype)});
      const size_t at = li * static_cast<size_t>(heads) * static_cast<size_t>(config_.head_dim);
      const size_t mean_count = scale_count * static_cast<size_t>(config_.head_dim);
      l.k_mean = Tensor(means_ + at, DType::kF32, {heads, config_.head_dim});
      l.v_mean = Tensor(means_ + mean_count + at, DType::kF32, {heads, config_.head_dim});
    }
    return l;
  }

  // The scales are rewritten in place, so a KvLayer held by the model sees the new ones.
  void set_scales(const KvScales& scales) override {
    check_kv_cache_args(config_, scales);
    const size_t n = scales.k.size();
    backend_.copy_to_device(scales_, scales.k.data(), n * sizeof(float));
    backend_.copy_to_device(scales_ + n, scales.v.data(), n * sizeof(float));
    if (!rotated_) return;
    // The means the rows are centred on; zeros when none are given.
    const size_t m = n * static_cast<size_t>(config_.head_dim);
    for (const auto& [src, dst] : {std::pair{&scales.k_mean, means_}, std::pair{&scales.v_mean, means_ + m}}) {
      const std::vector<float> zeros(src->empty() ? m : 0, 0.0f);
      backend_.copy_to_device(dst, src->empty() ? zeros.data() : src->data(), m * sizeof(float));
    }
  }

 private:
  CudaBackend& backend_;
  KvCacheConfig config_;
  bool rotated_ = false;
  size_t layer_bytes_ = 0;
  size_t row_param_bytes_ = 0;
  char* base_ = nullptr;
  float* scales_ = nullptr;
  float* means_ = nullptr;
  int32_t* table_ = nullptr;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not sticky, clear it
    return 0;
  }
  return n;
}

bool cuda_has_nccl() {
#ifdef SERVE8_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

void CudaBackend::check_communicators(int n) const {
  SERVE8_CHECK(cuda_has_nccl(), "--tp-size {}: this serve8 was built without NCCL (no nccl.h at configure time)", n);
  const int visible = cuda_device_count();
  SERVE8_CHECK(n >= 1 && n <= visible, "--tp-size {}: tensor parallelism on CUDA puts one rank on each GPU; {} visible",
               n, visible);
}

std::vector<std::unique_ptr<Communicator>> CudaBackend::create_communicators(int n, int64_t max_reduce_elems) {
  (void)max_reduce_elems;  // NCCL reduces in place
  check_communicators(n);
#ifdef SERVE8_HAVE_NCCL
  return make_nccl_communicators(n);
#else
  return {};  // unreachable: check_communicators refused
#endif
}

std::unique_ptr<Backend> create_cuda_backend(DType compute, AttentionOptions options, int device) {
  return std::make_unique<CudaBackend>(compute, options, device);
}

CudaBackend::CudaBackend(DType compute, AttentionOptions options, int device) : compute_(compute) {
  SERVE8_CHECK(compute == DType::kBF16 || compute == DType::kF32,
               "cuda: compute dtype {} is not supported (bf16 or fp32; fp16 compute is not supported yet)",
               dtype_name(compute));
  if (device >= 0) {
    const int n = cuda_device_count();
    SERVE8_CHECK(device < n, "cuda: no GPU {} ({} visible)", device, n);
    SERVE8_CUDA_CHECK(cudaSetDevice(device));
  }
  SERVE8_CUDA_CHECK(cudaGetDevice(&device_));
  SERVE8_CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
  SERVE8_CHECK(props_.major >= 9, "cuda: {} is compute capability {}.{}; serve8's kernels are built for sm_90a",
               props_.name, props_.major, props_.minor);
  SERVE8_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  profiler_.attach(stream_);
  attention_ = std::make_unique<AttentionUnit>(stream_, props_.multiProcessorCount, options);
  gemm_ = std::make_unique<CublasLtGemm>(stream_);
  skinny_ = std::make_unique<SkinnyGemm>(props_.multiProcessorCount);
  set_gemm_tuning(gemm_tuning_);  // this GPU's entries of the table
  sampler_ = std::make_unique<CudaSampler>(stream_);
}

CudaBackend::~CudaBackend() {
  on_device();
  if (stream_) cudaStreamSynchronize(stream_);
  gemm_.reset();
  skinny_.reset();
  sampler_.reset();
  attention_.reset();
  if (arrays_) cudaFree(arrays_);
  if (rotated_q_) cudaFree(rotated_q_);
  if (widened_) cudaFree(widened_);
  if (stream_) cudaStreamDestroy(stream_);
}

// Never throws (free() and destructors call it): a failed switch shows in the CUDA call after it.
void CudaBackend::on_device() const noexcept {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != device_) cudaSetDevice(device_);
}

std::string CudaBackend::device_description() const {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  return fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB, L2 {} MiB, CUDA runtime {}.{}, driver {}.{}", props_.name,
                     props_.major, props_.minor, props_.multiProcessorCount,
                     static_cast<double>(props_.totalGlobalMem) / (1ull << 30), props_.l2CacheSize >> 20,
                     runtime / 1000, (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10);
}

void* CudaBackend::alloc(size_t bytes) {
  on_device();
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail("cuda: out of device memory allocating {} bytes ({} bytes free)", bytes, free_memory());
  }
  SERVE8_CUDA_CHECK(err);
  SERVE8_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return p;
}

void CudaBackend::free(void* ptr) {
  on_device();
  if (!ptr) return;
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may still use it
  SERVE8_CUDA_CHECK(cudaFree(ptr));
}

void CudaBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  on_device();
  if (bytes) SERVE8_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  on_device();
  if (bytes) SERVE8_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::synchronize() {
  on_device();
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

size_t CudaBackend::free_memory() const {
  on_device();
  size_t free_b = 0, total_b = 0;
  SERVE8_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

size_t CudaBackend::total_memory() const {
  on_device();
  size_t free_b = 0, total_b = 0;
  SERVE8_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b;
}

std::unique_ptr<KvCache> CudaBackend::create_kv_cache(const KvCacheConfig& config, const KvScales& scales) {
  on_device();
  auto kv = std::make_unique<CudaKvCache>(*this, config, scales);
  if (kv_dtype_is_rotated(config.dtype)) {
    rotated_pool_ = true;
    reserve_rotation();
  }
  // A step reads at most every row of the table whole (padded rows add one entry each).
  const auto entries = static_cast<int64_t>(CudaKvCache::table_entries(config));
  if (entries > kv_capacity_) {
    kv_capacity_ = entries;
    reserve_batch_arrays();
  }
  return kv;
}

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor out) { embedding_shard(table, ids, 0, out); }

void CudaBackend::embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out) {
  on_device();
  const OpScope profile(profiler_, "embedding");
  constexpr const char* op = "embedding";
  check_present(table, op, "table");
  check_dtype(ids, DType::kI32, op, "ids");
  SERVE8_CHECK(table.ndim == 2 && ids.ndim == 1, "{}: table {} and ids {} must be [V, H] and [T]", op,
               table.shape_str(), ids.shape_str());
  SERVE8_CHECK(out.dtype == table.dtype && out.numel() == ids.dim(0) * table.dim(1) && rows_of(out) == ids.dim(0),
               "{}: out is {} {}, expected {} [{}, {}]", op, dtype_name(out.dtype), out.shape_str(),
               dtype_name(table.dtype), ids.dim(0), table.dim(1));
  GatherRowsParams p;
  p.src = table.data;
  p.rows = ids.ptr<const int32_t>();
  p.dst = out.data;
  p.row_bytes = table.dim(1) * static_cast<int64_t>(dtype_size(table.dtype));
  p.first_row = first_id;
  p.num_src_rows = table.dim(0);
  p.num_rows = to_int(ids.dim(0), op, "tokens");
  launch_gather_rows(p, stream_);
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor out) {
  on_device();
  const OpScope profile(profiler_, "gather_rows");
  constexpr const char* op = "gather_rows";
  check_dtype(rows, DType::kI32, op, "rows");
  SERVE8_CHECK(rows.ndim == 1 && x.ndim >= 1, "{}: rows {} must be [M] and x {} non-scalar", op, rows.shape_str(),
               x.shape_str());
  SERVE8_CHECK(out.dtype == x.dtype, "{}: out is {} but x is {}", op, dtype_name(out.dtype), dtype_name(x.dtype));
  SERVE8_CHECK(out.ndim >= 1 && out.dim(0) == rows.dim(0) && out.row_size() == x.row_size(),
               "{}: out {} cannot hold {} rows of x {}", op, out.shape_str(), rows.dim(0), x.shape_str());
  GatherRowsParams p;
  p.src = x.data;
  p.rows = rows.ptr<const int32_t>();
  p.dst = out.data;
  p.row_bytes = x.row_size() * static_cast<int64_t>(dtype_size(x.dtype));
  p.num_src_rows = x.dim(0);
  p.num_rows = to_int(rows.dim(0), op, "rows");
  launch_gather_rows(p, stream_);
}

void CudaBackend::rmsnorm_impl(const char* op, const Tensor& x, Tensor* residual, const Tensor& weight, float eps,
                               Tensor out, const Fp8Rows* fp8) {
  check_activation(x, op, "x");
  check_dtype(out, x.dtype, op, "out");
  SERVE8_CHECK(x.ndim == 2, "{}: x has shape {}, expected [T, H]", op, x.shape_str());
  SERVE8_CHECK(out.ndim == 2 && out.dim(0) == x.dim(0) && out.dim(1) == x.dim(1), "{}: out {} does not match x {}", op,
               out.shape_str(), x.shape_str());
  SERVE8_CHECK(
      weight.ndim == 1 && weight.dim(0) == x.dim(1) && (weight.dtype == DType::kBF16 || weight.dtype == DType::kF32),
      "{}: weight is {} {}, expected bf16 or fp32 [{}]", op, dtype_name(weight.dtype), weight.shape_str(), x.dim(1));
  if (residual) {
    check_dtype(*residual, x.dtype, op, "residual");
    SERVE8_CHECK(residual->ndim == 2 && residual->dim(0) == x.dim(0) && residual->dim(1) == x.dim(1),
                 "{}: residual {} does not match x {}", op, residual->shape_str(), x.shape_str());
  }
  if (fp8) check_fp8_rows(*fp8, out, op);
  RmsNormParams p;
  p.dtype = x.dtype;
  p.x = x.data;
  p.residual = residual ? residual->data : nullptr;
  p.q = fp8 ? fp8->q.ptr<uint8_t>() : nullptr;
  p.q_scale = fp8 ? fp8->scale.ptr<float>() : nullptr;
  p.weight = weight.data;
  p.weight_f32 = weight.dtype == DType::kF32;
  p.out = out.data;
  p.rows = to_int(x.dim(0), op, "rows");
  p.hidden = to_int(x.dim(1), op, "hidden");
  p.eps = eps;
  launch_rmsnorm(p, stream_);
}

void CudaBackend::rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) {
  on_device();
  const OpScope profile(profiler_, "rmsnorm");
  rmsnorm_impl("rmsnorm", x, nullptr, weight, eps, out, nullptr);
}

void CudaBackend::add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out,
                              const Fp8Rows* fp8) {
  on_device();
  const OpScope profile(profiler_, "add_rmsnorm");
  rmsnorm_impl("add_rmsnorm", x, &residual, weight, eps, out, fp8);
}

void CudaBackend::gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  on_device();
  const OpScope profile(profiler_, "gemm");
  constexpr const char* op = "gemm";
  SERVE8_CHECK(x.dtype == DType::kBF16 || x.dtype == DType::kF16 || x.dtype == DType::kF32,
               "{}: x is {}, expected bf16, fp16 or fp32", op, dtype_name(x.dtype));
  SERVE8_CHECK(w.dtype == x.dtype, "{}: w is {} but x is {}", op, dtype_name(w.dtype), dtype_name(x.dtype));
  SERVE8_CHECK(out.dtype == x.dtype || out.dtype == DType::kF32, "{}: out is {}, expected {} or fp32", op,
               dtype_name(out.dtype), dtype_name(x.dtype));
  SERVE8_CHECK(w.ndim == 2, "{}: w has shape {}, expected [N, K]", op, w.shape_str());
  const int64_t n = w.dim(0), k = w.dim(1);
  SERVE8_CHECK(x.ndim >= 1 && x.dim(-1) == k, "{}: x {} and w {} disagree on K", op, x.shape_str(), w.shape_str());
  const int64_t m = rows_of(x);
  SERVE8_CHECK(out.ndim >= 1 && out.dim(-1) == n && out.numel() == m * n, "{}: out has shape {}, expected [{}, {}]", op,
               out.shape_str(), m, n);
  if (bias) {
    SERVE8_CHECK(bias->ndim == 1 && bias->dim(0) == n, "{}: bias has shape {}, expected [{}]", op, bias->shape_str(),
                 n);
    SERVE8_CHECK((bias->dtype == DType::kBF16 || bias->dtype == DType::kF32) &&
                     (out.dtype == DType::kBF16 || out.dtype == DType::kF32),
                 "{}: bias {} with out {} is not supported (bf16 or fp32 each)", op, dtype_name(bias->dtype),
                 dtype_name(out.dtype));
  }
  SERVE8_CHECK(k > 0 || m == 0 || n == 0, "{}: K is 0", op);
  // A few bf16 rows: serve8's skinny kernel where it was timed faster on this GPU.
  const GemmArgs library = cuda_ops::gemm_args(x, w, bias, out, m);
  if (x.dtype == DType::kBF16 && k % 16 == 0 && aligned16(x.data) && aligned16(w.data) && m <= kSkinnyMaxRows) {
    const SkinnyGemmArgs ours = cuda_ops::skinny_args(x, w, nullptr, bias, out, m);
    if (noting_gemms_) note_gemm(false, ours, library);
    if (bf16_gemm_takes_skinny(fp8_choices_, n, k, m) && skinny_->run(ours, stream_)) return;
  }
  gemm_->run(library);
}

RopeParams CudaBackend::rope_params(const char* op, Tensor q, Tensor k, const Tensor& positions,
                                    const Tensor& inv_freq) const {
  check_activation(q, op, "q");
  check_dtype(k, q.dtype, op, "k");
  SERVE8_CHECK(q.ndim == 3 && k.ndim == 3, "{}: q {} and k {} must be [T, heads, D]", op, q.shape_str(), k.shape_str());
  const int64_t t = q.dim(0), d = q.dim(2);
  SERVE8_CHECK(k.dim(0) == t && k.dim(2) == d && d % 2 == 0, "{}: q {} and k {} disagree (T, even D)", op,
               q.shape_str(), k.shape_str());
  check_dtype(positions, DType::kI32, op, "positions");
  SERVE8_CHECK(positions.ndim == 1 && positions.dim(0) == t, "{}: positions {} for {} tokens", op,
               positions.shape_str(), t);
  check_dtype(inv_freq, DType::kF32, op, "inv_freq");
  SERVE8_CHECK(inv_freq.ndim == 1 && inv_freq.dim(0) == d / 2, "{}: inv_freq {} for head_dim {}", op,
               inv_freq.shape_str(), d);
  RopeParams p;
  p.dtype = q.dtype;
  p.q = q.data;
  p.q_out = q.data;
  p.k = k.data;
  p.q_stride = q.dim(1) * d;
  p.k_stride = k.dim(1) * d;
  p.positions = positions.ptr<const int32_t>();
  p.inv_freq = inv_freq.ptr<const float>();
  p.num_tokens = to_int(t, op, "tokens");
  p.num_q_heads = to_int(q.dim(1), op, "q heads");
  p.num_kv_heads = to_int(k.dim(1), op, "kv heads");
  p.head_dim = to_int(d, op, "head_dim");
  return p;
}

void CudaBackend::rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) {
  on_device();
  const OpScope profile(profiler_, "rope");
  launch_rope(rope_params("rope", q, k, positions, inv_freq), stream_);
}

void CudaBackend::silu_mul(const Tensor& gate_up, Tensor out, const Fp8Rows* fp8) {
  on_device();
  const OpScope profile(profiler_, "silu_mul");
  constexpr const char* op = "silu_mul";
  check_activation(gate_up, op, "gate_up");
  check_dtype(out, gate_up.dtype, op, "out");
  SERVE8_CHECK(gate_up.ndim == 2 && gate_up.dim(1) % 2 == 0, "{}: gate_up has shape {}, expected [T, 2I]", op,
               gate_up.shape_str());
  SERVE8_CHECK(out.ndim == 2 && out.dim(0) == gate_up.dim(0) && out.dim(1) == gate_up.dim(1) / 2,
               "{}: out {} for gate_up {}", op, out.shape_str(), gate_up.shape_str());
  if (fp8) check_fp8_rows(*fp8, out, op);
  SiluMulParams p;
  p.dtype = gate_up.dtype;
  p.gate_up = gate_up.data;
  p.out = out.data;
  p.q = fp8 ? fp8->q.ptr<uint8_t>() : nullptr;
  p.q_scale = fp8 ? fp8->scale.ptr<float>() : nullptr;
  p.rows = to_int(gate_up.dim(0), op, "rows");
  p.inter = to_int(out.dim(1), op, "intermediate size");
  launch_silu_mul(p, stream_);
}

void CudaBackend::sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids) {
  on_device();
  const OpScope profile(profiler_, "sample");
  constexpr const char* op = "sample";
  check_dtype(logits, DType::kF32, op, "logits");
  SERVE8_CHECK(logits.ndim == 2 && logits.dim(1) > 0, "{}: logits has shape {}, expected [B, V]", op,
               logits.shape_str());
  const int64_t b = logits.dim(0), vocab = logits.dim(1);
  SERVE8_CHECK(static_cast<int64_t>(rows.size()) == b, "{}: {} sampling rows for {} rows of logits", op, rows.size(),
               b);
  SERVE8_CHECK(out_ids != nullptr || b == 0, "{}: out_ids is null", op);
  SERVE8_CHECK(vocab <= kSelectMaxVocab, "{}: a vocabulary of {} tokens is more than the CUDA sampler's {}", op, vocab,
               kSelectMaxVocab);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingRow& r = rows[i];
    SERVE8_CHECK(r.temperature >= 0.0f && std::isfinite(r.temperature) && !std::isnan(r.top_p) && !std::isnan(r.min_p),
                 "{}: row {} has temperature {}, top_p {}, min_p {}", op, i, r.temperature, r.top_p, r.min_p);
  }
  sampler_->sample(logits.ptr<const float>(), b, vocab, rows, out_ids);
}

void CudaBackend::edit_logits(Tensor logits, std::span<const LogitEdit> edits) {
  on_device();
  const OpScope profile(profiler_, "sample");
  check_dtype(logits, DType::kF32, "edit_logits", "logits");
  SERVE8_CHECK(logits.ndim == 2, "edit_logits: logits has shape {}, expected [B, V]", logits.shape_str());
  for (const LogitEdit& e : edits)
    SERVE8_CHECK(e.row >= 0 && e.row < logits.dim(0) && e.token >= 0 && e.token < logits.dim(1),
                 "edit_logits: ({}, {}) is outside logits {}", e.row, e.token, logits.shape_str());
  sampler_->edit(logits.ptr<float>(), logits.dim(1), edits);
}

void CudaBackend::mask_logits(Tensor logits, std::span<const int32_t> rows, std::span<const int32_t> allowed) {
  on_device();
  const OpScope profile(profiler_, "sample");
  check_dtype(logits, DType::kF32, "mask_logits", "logits");
  SERVE8_CHECK(logits.ndim == 2, "mask_logits: logits has shape {}, expected [B, V]", logits.shape_str());
  const int64_t words = (logits.dim(1) + 31) / 32;
  SERVE8_CHECK(static_cast<int64_t>(allowed.size()) == static_cast<int64_t>(rows.size()) * words,
               "mask_logits: {} mask words for {} rows of {} tokens, expected {} a row", allowed.size(), rows.size(),
               logits.dim(1), words);
  for (int32_t r : rows)
    SERVE8_CHECK(r >= 0 && r < logits.dim(0), "mask_logits: row {} is outside logits {}", r, logits.shape_str());
  sampler_->mask(logits.ptr<float>(), logits.dim(1), rows, allowed);
}

// The requested rows come back to the host and row_logprobs() works there: a copy of V floats per
// row that asked, only on steps where one did.
std::vector<RowLogprobs> CudaBackend::logprobs(const Tensor& logits, std::span<const int32_t> rows,
                                               std::span<const int32_t> chosen, int top_n) {
  on_device();
  const OpScope profile(profiler_, "sample");
  check_dtype(logits, DType::kF32, "logprobs", "logits");
  SERVE8_CHECK(logits.ndim == 2 && rows.size() == chosen.size(), "logprobs: logits {} for {} rows and {} tokens",
               logits.shape_str(), rows.size(), chosen.size());
  const int64_t v = logits.dim(1);
  std::vector<float> row(static_cast<size_t>(v));
  std::vector<RowLogprobs> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    SERVE8_CHECK(rows[i] >= 0 && rows[i] < logits.dim(0), "logprobs: row {} of logits {}", rows[i], logits.shape_str());
    copy_to_host(row.data(), logits.ptr<const float>() + rows[i] * v, static_cast<size_t>(v) * sizeof(float));
    out.push_back(row_logprobs(row.data(), v, chosen[i], top_n));
  }
  return out;
}

}  // namespace serve8
