// The CUDA backend's batch-shaped ops: upload_batch (into fixed device arrays), kv_store and
// attention (checks, then the attention unit's plan and run).
#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_unit.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_checks.h"
#include "core/error.h"
#include "core/log.h"

namespace serve8 {
namespace {

struct KvGeometry {
  int64_t num_slots, heads, head_dim;
};

KvGeometry check_kv_layer(const KvLayer& kv, const char* op) {
  SERVE8_CHECK(kv.k.ndim == 4 && kv.k.dim(2) == kKvPageSize,
               "{}: kv.k has shape {}, expected [pages, kv_heads, {}, head_dim]", op, kv.k.shape_str(), kKvPageSize);
  const int64_t width = kv.k.dim(3);
  const KvGeometry g{kv.k.dim(0) * kKvPageSize, kv.k.dim(1), kv.k.dtype == DType::kI4 ? 2 * width : width};
  SERVE8_CHECK(kv.v.ndim == 4 && kv.v.dim(0) == kv.k.dim(0) && kv.v.dim(1) == g.heads && kv.v.dim(2) == kKvPageSize &&
                   kv.v.dim(3) == width && kv.v.dtype == kv.k.dtype,
               "{}: kv.v is {} {} but kv.k is {} {}", op, dtype_name(kv.v.dtype), kv.v.shape_str(),
               dtype_name(kv.k.dtype), kv.k.shape_str());
  switch (kv.k.dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kF32:  // with fp32 activations only (checked by the ops)
      break;
    case DType::kI8:
    case DType::kI4:
      SERVE8_CHECK(g.head_dim == 64 || g.head_dim == 128, "{}: {} KV needs head_dim 64 or 128 on CUDA, got {}", op,
                   dtype_name(kv.k.dtype), g.head_dim);
      SERVE8_CHECK(kv.row_params.data && kv.row_params.dtype == DType::kF16 &&
                       kv.row_params.numel() == kv_row_param_bytes(kv.k.dtype) * g.num_slots * g.heads,
                   "{}: {} KV needs {} bytes of fp16 row parameters per slot and KV head, got {} {}", op,
                   dtype_name(kv.k.dtype), 2 * kv_row_param_bytes(kv.k.dtype), dtype_name(kv.row_params.dtype),
                   kv.row_params.shape_str());
      for (const Tensor* t : {&kv.k_mean, &kv.v_mean}) {
        SERVE8_CHECK(t->data && t->dtype == DType::kF32 && t->numel() == g.heads * g.head_dim,
                     "{}: {} KV needs fp32 K and V means [{}, {}], got {} {}", op, dtype_name(kv.k.dtype), g.heads,
                     g.head_dim, dtype_name(t->dtype), t->shape_str());
      }
      break;
    case DType::kI32:
      fail(
          "{}: KV storage dtype {} is not supported on CUDA (expected bf16, fp16, fp8_e5m2, fp8_e4m3, int8, int4 or "
          "fp32)",
          op, dtype_name(kv.k.dtype));
  }
  for (const Tensor* s : {&kv.k_scale, &kv.v_scale}) {
    SERVE8_CHECK(s->dtype == DType::kF32 && s->ndim == 1 && s->dim(0) == g.heads,
                 "{}: kv scales are {} {}, expected fp32 [{}]", op, dtype_name(s->dtype), s->shape_str(), g.heads);
  }
  return g;
}

// The orthonormal Walsh-Hadamard transform's factor, as the CPU reference computes it.
float hadamard_norm(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

// An fp32 pool holds what fp32 compute wrote; bf16 activations never meet it.
void check_kv_matches_activations(DType kv, DType act, const char* op) {
  SERVE8_CHECK(kv != DType::kF32 || act == DType::kF32,
               "{}: an fp32 KV pool needs fp32 activations (--dtype float32), got {}", op, dtype_name(act));
}

}  // namespace

StagedBuffer::~StagedBuffer() {
  if (copied_) cudaEventSynchronize(copied_), cudaEventDestroy(copied_);
  if (host_) cudaFreeHost(host_);
  if (device_) cudaFree(device_);
}

void StagedBuffer::reserve(size_t bytes, cudaStream_t stream) {
  if (!copied_) SERVE8_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  if (bytes <= capacity_) return;
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued kernels may still read the old one
  if (host_) SERVE8_CUDA_CHECK(cudaFreeHost(host_));
  if (device_) SERVE8_CUDA_CHECK(cudaFree(device_));
  host_ = device_ = nullptr;
  capacity_ = 0;
  SERVE8_CUDA_CHECK(cudaMallocHost(&host_, bytes));
  SERVE8_CUDA_CHECK(cudaMalloc(&device_, bytes));
  capacity_ = bytes;
}

char* StagedBuffer::host() {
  // A step ends with its sampled ids copied back, so the copy this waits for has long run.
  SERVE8_CUDA_CHECK(cudaEventSynchronize(copied_));
  return host_;
}

void StagedBuffer::upload(size_t bytes, cudaStream_t stream) {
  if (bytes) SERVE8_CUDA_CHECK(cudaMemcpyAsync(device_, host_, bytes, cudaMemcpyHostToDevice, stream));
  SERVE8_CUDA_CHECK(cudaEventRecord(copied_, stream));
}

void CudaBackend::reserve_steps(const StepLimits& limits) {
  on_device();
  SERVE8_CHECK(limits.max_tokens > 0 && limits.max_seqs > 0 && limits.max_seqs <= limits.max_tokens,
               "reserve_steps: {} tokens and {} sequences a step (expected positive, sequences <= tokens)",
               limits.max_tokens, limits.max_seqs);
  limits_.max_tokens = std::max(limits_.max_tokens, limits.max_tokens);
  limits_.max_seqs = std::max(limits_.max_seqs, limits.max_seqs);
  limits_.num_q_heads = limits.num_q_heads;
  limits_.num_kv_heads = limits.num_kv_heads;
  limits_.head_dim = limits.head_dim;
  attention_->reserve(limits_.max_seqs, limits.num_q_heads, limits.num_kv_heads, limits.head_dim);
  reserve_batch_arrays();
  reserve_rotation();
  if (limits.fp8_weight_only_elems > widened_elems_) {
    SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (widened_) SERVE8_CUDA_CHECK(cudaFree(widened_));
    widened_ = nullptr;
    const size_t bytes = static_cast<size_t>(limits.fp8_weight_only_elems) * dtype_size(compute_);
    SERVE8_CUDA_CHECK(cudaMalloc(&widened_, bytes));
    widened_elems_ = limits.fp8_weight_only_elems;
    spdlog::info("weight-only FP8: {:.2f} GiB for the largest matrix widened, for GEMMs of more than {} rows",
                 static_cast<double>(bytes) / (1 << 30), kSkinnyMaxRowsBf16);
  }
}

// The fixed arrays, one after another in one allocation: per token, per sequence, the prefill
// work list, then kv_indices. Padded CUDA-graph rows count as sequences of one KV entry.
void CudaBackend::reserve_batch_arrays() {
  if (limits_.max_tokens == 0) return;  // sized once the limits are known
  const int64_t t = limits_.max_tokens, b = limits_.max_seqs;
  const int group = limits_.num_kv_heads > 0 ? std::max(1, limits_.num_q_heads / limits_.num_kv_heads) : 1;
  const int64_t w = max_prefill_work(limits_.max_tokens, limits_.max_seqs, group);
  const int64_t kv = kv_capacity_ + b;
  const int64_t total = 5 * t + 4 * (b + 1) + 2 * w + kv;
  // The packed upload holds the same arrays (but out_slots, token_seq, last rows, kv_indices) and
  // the new slots, at most one per KV entry.
  staged_.reserve(static_cast<size_t>(2 * t + 3 * (b + 1) + 2 * w + kv) * sizeof(int32_t), stream_);
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (arrays_) SERVE8_CUDA_CHECK(cudaFree(arrays_));
  arrays_ = nullptr;
  SERVE8_CUDA_CHECK(cudaMalloc(&arrays_, static_cast<size_t>(total) * sizeof(int32_t)));
  int32_t* p = arrays_;
  const auto take = [&p](int64_t n) { return std::exchange(p, p + n); };
  fixed_.out.tokens = take(t);
  fixed_.out.positions = take(t);
  fixed_.out_slots = take(t);
  fixed_.token_seq = take(t);
  take(t);  // keeps the per-sequence arrays 16-byte aligned whatever t
  fixed_.out.qo_indptr = take(b + 1);
  fixed_.out.kv_indptr = take(b + 1);
  fixed_.last_token_rows = take(b + 1);
  take(b + 1);
  fixed_.out.work_seq = take(w);
  fixed_.out.work_row0 = take(w);
  fixed_.kv_indices = take(kv);
  work_seq_.resize(static_cast<size_t>(w));
  work_row0_.resize(static_cast<size_t>(w));
  ++batch_generation_;  // a batch uploaded before points at the old arrays
}

DeviceBatch CudaBackend::upload_batch(const ForwardBatch& batch, KvCache& kv) {
  on_device();
  batch.validate();
  const KvCacheConfig& c = kv.config();
  check_batch_fits(batch, c);
  const int64_t t = batch.num_tokens(), b = batch.num_seqs(), n = static_cast<int64_t>(batch.new_slots.size());
  const int64_t kv_total = batch.kv_indptr.back();
  SERVE8_CHECK(limits_.max_tokens > 0, "upload_batch: reserve_steps was not called (the model does it when made)");
  SERVE8_CHECK(t <= limits_.max_tokens && b <= limits_.max_seqs,
               "upload_batch: {} tokens in {} sequences exceed the reserved {} / {}", t, b, limits_.max_tokens,
               limits_.max_seqs);
  SERVE8_CHECK(kv_total <= kv_capacity_ + limits_.max_seqs,
               "upload_batch: {} KV entries exceed the {} of the largest KV cache's table", kv_total, kv_capacity_);
  const Tensor table = kv.req_to_token();
  // Pack: tokens, positions, qo_indptr, kv_indptr, req_rows, new_slot_indptr, work list, new slots.
  auto* host = reinterpret_cast<int32_t*>(staged_.host());
  auto* dev = reinterpret_cast<int32_t*>(staged_.device());
  int64_t off = 0;
  const auto put = [&](const std::vector<int32_t>& v) {
    std::copy(v.begin(), v.end(), host + off);
    return std::exchange(off, off + static_cast<int64_t>(v.size()));
  };
  BatchUnpackParams u = fixed_;
  u.in.tokens = dev + put(batch.tokens);
  u.in.positions = dev + put(batch.positions);
  u.in.qo_indptr = dev + put(batch.qo_indptr);
  u.in.kv_indptr = dev + put(batch.kv_indptr);
  u.req_rows = dev + put(batch.req_rows);
  u.new_slot_indptr = dev + put(batch.new_slot_indptr);
  plan_ = attention_->plan(batch, c.dtype, work_seq_.data(), work_row0_.data());
  u.num_work = plan_.prefill.num_work;
  const auto put_work = [&](const std::vector<int32_t>& v) {
    std::copy(v.begin(), v.begin() + u.num_work, host + off);
    return std::exchange(off, off + u.num_work);
  };
  u.in.work_seq = dev + put_work(work_seq_);
  u.in.work_row0 = dev + put_work(work_row0_);
  u.new_slots = dev + put(batch.new_slots);
  SERVE8_CHECK(static_cast<size_t>(off) * sizeof(int32_t) <= staged_.capacity(),
               "upload_batch: {} new slots do not fit the staging buffer", n);
  staged_.upload(static_cast<size_t>(off) * sizeof(int32_t), stream_);

  DeviceBatch d;
  d.host = &batch;
  d.num_seqs = static_cast<int>(b);
  d.num_tokens = static_cast<int>(t);
  for (int64_t s = 0; s < b; ++s) {
    const auto i = static_cast<size_t>(s);
    d.max_q_len = std::max(d.max_q_len, batch.qo_indptr[i + 1] - batch.qo_indptr[i]);
    d.max_kv_len = std::max(d.max_kv_len, batch.kv_indptr[i + 1] - batch.kv_indptr[i]);
  }
  u.table = table.ptr<int32_t>();
  u.row_len = table.dim(1);
  u.num_seqs = d.num_seqs;
  u.max_kv_len = d.max_kv_len;
  launch_batch_unpack(u, stream_);
  d.tokens = Tensor(fixed_.out.tokens, DType::kI32, {t});
  d.positions = Tensor(fixed_.out.positions, DType::kI32, {t});
  d.out_slots = Tensor(fixed_.out_slots, DType::kI32, {t});
  d.qo_indptr = Tensor(fixed_.out.qo_indptr, DType::kI32, {b + 1});
  d.kv_indptr = Tensor(fixed_.out.kv_indptr, DType::kI32, {b + 1});
  d.kv_indices = Tensor(fixed_.kv_indices, DType::kI32, {kv_total});
  d.last_token_rows = Tensor(fixed_.last_token_rows, DType::kI32, {b});
  ++batch_generation_;
  batch_tokens_ = d.tokens.data;
  return d;
}

void CudaBackend::check_current_batch(const DeviceBatch& batch, const char* op) const {
  SERVE8_CHECK(batch.host != nullptr && batch.tokens.data == batch_tokens_ && batch_generation_ > 0,
               "{}: the batch was not made by this backend's latest upload_batch", op);
}
KvStoreParams CudaBackend::kv_store_params(const char* op, const Tensor& k, const Tensor& v, const DeviceBatch& batch,
                                           const KvLayer& kv) const {
  const KvGeometry g = check_kv_layer(kv, op);
  check_current_batch(batch, op);
  SERVE8_CHECK(k.dtype == DType::kBF16 || k.dtype == DType::kF32, "{}: k is {}, expected bf16 or fp32", op,
               dtype_name(k.dtype));
  for (const auto& [x, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    SERVE8_CHECK(x->dtype == k.dtype && x->ndim == 3 && x->dim(0) == batch.num_tokens && x->dim(1) == g.heads &&
                     x->dim(2) == g.head_dim,
                 "{}: {} is {} {}, expected {} [{}, {}, {}]", op, name, dtype_name(x->dtype), x->shape_str(),
                 dtype_name(k.dtype), batch.num_tokens, g.heads, g.head_dim);
  }
  check_kv_matches_activations(kv.k.dtype, k.dtype, op);
  KvStoreParams p;
  p.dtype = k.dtype;
  p.k = k.data;
  p.v = v.data;
  p.k_stride = p.v_stride = g.heads * g.head_dim;
  p.out_slots = batch.out_slots.ptr<const int32_t>();
  p.k_pool = kv.k.data;
  p.v_pool = kv.v.data;
  p.k_scale = kv.k_scale.ptr<const float>();
  p.v_scale = kv.v_scale.ptr<const float>();
  p.num_tokens = batch.num_tokens;
  p.num_kv_heads = static_cast<int>(g.heads);
  p.head_dim = static_cast<int>(g.head_dim);
  p.kv_dtype = kv.k.dtype;
  if (kv_dtype_is_rotated(kv.k.dtype)) {
    SERVE8_CHECK(k.dtype == DType::kBF16, "{}: {} KV takes bf16 k and v, got {}", op, dtype_name(kv.k.dtype),
                 dtype_name(k.dtype));
    p.row_params = kv.row_params.data;
    p.k_mean = kv.k_mean.ptr<const float>();
    p.v_mean = kv.v_mean.ptr<const float>();
    p.norm = hadamard_norm(g.head_dim);
  }
  return p;
}

void CudaBackend::kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) {
  on_device();
  const OpScope profile(profiler_, "kv_store");
  const KvStoreParams p = kv_store_params("kv_store", k, v, batch, kv);
  if (kv_dtype_is_rotated(kv.k.dtype)) {
    launch_kv_store_rotated(p, stream_);
  } else {
    launch_kv_store(p, stream_);
  }
}

void CudaBackend::rope_kv_store(Tensor qkv, Tensor q, const Tensor& positions, const Tensor& inv_freq,
                                const DeviceBatch& batch, const KvLayer& kv) {
  on_device();
  constexpr const char* op = "rope_kv_store";
  cuda_ops::check_activation(qkv, op, "qkv");
  cuda_ops::check_dtype(q, qkv.dtype, op, "q");
  const int64_t hq = q.ndim == 3 ? q.dim(1) : 0, hkv = kv.k.ndim == 4 ? kv.k.dim(1) : 0;
  SERVE8_CHECK(
      q.ndim == 3 && qkv.ndim == 3 && qkv.dim(0) == q.dim(0) && qkv.dim(1) == hq + 2 * hkv && qkv.dim(2) == q.dim(2),
      "{}: qkv {} and q {} for {} KV heads, expected [T, Hq + 2 Hkv, D] and [T, Hq, D]", op, qkv.shape_str(),
      q.shape_str(), hkv);
  // k and v as [T, Hkv, D] for the checks; the kernels step from token to token by the row stride.
  const int64_t t = q.dim(0), d = q.dim(2), stride = qkv.dim(1) * d;
  const size_t es = dtype_size(qkv.dtype);
  const Tensor k(static_cast<char*>(qkv.data) + static_cast<size_t>(hq * d) * es, qkv.dtype, {t, hkv, d});
  const Tensor v(static_cast<char*>(qkv.data) + static_cast<size_t>((hq + hkv) * d) * es, qkv.dtype, {t, hkv, d});
  RopeParams r = rope_params(op, q, k, positions, inv_freq);
  KvStoreParams s = kv_store_params(op, k, v, batch, kv);
  r.q = qkv.data;
  r.q_stride = r.k_stride = s.k_stride = s.v_stride = stride;
  const OpScope profile(profiler_, op);
  if (kv_dtype_is_rotated(kv.k.dtype)) {  // int8/int4 pools keep their rotated store
    launch_rope(r, stream_);
    launch_kv_store_rotated(s, stream_);
  } else if (rope_kv_store_fusable(r, s)) {
    launch_rope_kv_store(r, s, stream_);
  } else {
    launch_rope(r, stream_);
    launch_kv_store(s, stream_);
  }
}

// The int8/int4 pools' rotated q: a buffer for the most tokens a step has, once such a pool exists.
void CudaBackend::reserve_rotation() {
  if (!rotated_pool_ || limits_.max_tokens == 0) return;
  const size_t bytes = static_cast<size_t>(limits_.max_tokens) * static_cast<size_t>(limits_.num_q_heads) *
                       static_cast<size_t>(limits_.head_dim) * 2;
  if (bytes <= rotated_q_bytes_) return;
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (rotated_q_) SERVE8_CUDA_CHECK(cudaFree(rotated_q_));
  rotated_q_ = nullptr;
  rotated_q_bytes_ = 0;
  SERVE8_CUDA_CHECK(cudaMalloc(&rotated_q_, bytes));
  rotated_q_bytes_ = bytes;
}

void CudaBackend::attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale,
                            Tensor out) {
  on_device();
  const OpScope profile(profiler_, "attention");
  constexpr const char* op = "attention";
  const KvGeometry g = check_kv_layer(kv, op);
  check_current_batch(batch, op);
  SERVE8_CHECK((q.dtype == DType::kBF16 || q.dtype == DType::kF32) && q.ndim == 3 && q.dim(0) == batch.num_tokens &&
                   q.dim(2) == g.head_dim,
               "{}: q is {} {}, expected bf16 or fp32 [{}, Hq, {}]", op, dtype_name(q.dtype), q.shape_str(),
               batch.num_tokens, g.head_dim);
  const int64_t hq = q.dim(1);
  SERVE8_CHECK(hq > 0 && hq % g.heads == 0, "{}: {} q heads is not a multiple of {} kv heads", op, hq, g.heads);
  SERVE8_CHECK(
      out.dtype == q.dtype && out.ndim == 3 && out.dim(0) == q.dim(0) && out.dim(1) == hq && out.dim(2) == g.head_dim,
      "{}: out is {} {}, expected {} {}", op, dtype_name(out.dtype), out.shape_str(), dtype_name(q.dtype),
      q.shape_str());
  check_kv_matches_activations(kv.k.dtype, q.dtype, op);
  SERVE8_CHECK(std::isfinite(softmax_scale), "{}: softmax_scale is {}", op, softmax_scale);
  SERVE8_CHECK(aligned16(q.data) && aligned16(out.data), "{}: q and out must be 16-byte aligned", op);
  const int group = static_cast<int>(hq / g.heads);
  const bool f32 = q.dtype == DType::kF32;
  // fp32 runs the generic kernel only: an unsupported head dim is an error, never a slow path.
  SERVE8_CHECK(!f32 || attention_fp32_path(static_cast<int>(g.head_dim), group),
               "{}: fp32 q/out (--dtype float32) is supported for head dims 8, 16, 32, 64 and 128 only (the generic "
               "CUDA-core kernel; the tensor-core kernels are bf16), but head_dim is {}: use --dtype bfloat16",
               op, g.head_dim);
  const bool fast = !f32 && attention_fast_path(static_cast<int>(g.head_dim), group);
  const bool generic = f32 || attention_generic_path(static_cast<int>(g.head_dim), group);
  SERVE8_CHECK(fast || generic,
               "{}: head_dim {} with GQA group {} ({} q heads over {} kv heads) and KV dtype {} is not supported on "
               "CUDA (head_dim 64 or 128 with groups 1..8; head_dim 8, 16 or 32 with any group)",
               op, g.head_dim, group, hq, g.heads, dtype_name(kv.k.dtype));
  SERVE8_CHECK(fast || !kv_dtype_is_rotated(kv.k.dtype),
               "{}: {} KV runs on the tensor-core kernels only (bf16 q, head_dim 64 or 128, groups 1..8), got {} q "
               "with head_dim {} and group {}",
               op, dtype_name(kv.k.dtype), dtype_name(q.dtype), g.head_dim, group);
  if (batch.num_tokens == 0) return;

  AttentionParams p;
  p.dtype = q.dtype;
  p.q = q.data;
  p.out = out.data;
  p.k_pool = kv.k.data;
  p.v_pool = kv.v.data;
  p.k_scale = kv.k_scale.ptr<const float>();
  p.v_scale = kv.v_scale.ptr<const float>();
  p.qo_indptr = batch.qo_indptr.ptr<const int32_t>();
  p.kv_indptr = batch.kv_indptr.ptr<const int32_t>();
  p.kv_indices = batch.kv_indices.ptr<const int32_t>();
  p.token_seq = fixed_.token_seq;
  p.num_seqs = batch.num_seqs;
  p.num_tokens = batch.num_tokens;
  p.num_q_heads = static_cast<int>(hq);
  p.num_kv_heads = static_cast<int>(g.heads);
  p.head_dim = static_cast<int>(g.head_dim);
  p.softmax_scale = softmax_scale;
  if (!fast) {
    launch_attention_generic(p, kv.k.dtype, stream_);
    return;
  }

  SERVE8_CHECK(hq == attention_->num_q_heads() && plan_.shape.kv_dtype == kv.k.dtype,
               "{}: q has {} heads over a {} pool, but the batch was planned for {} q heads over {} (reserve_steps, "
               "upload_batch)",
               op, hq, dtype_name(kv.k.dtype), attention_->num_q_heads(), dtype_name(plan_.shape.kv_dtype));
  if (!kv_dtype_is_rotated(kv.k.dtype)) {
    attention_->run(p, plan_, fixed_.out.work_seq, fixed_.out.work_row0);
    return;
  }
  // int8/int4 rows are rotated by H: q . k = (H q) . (H k), and the output comes back as H o (its
  // mean, which the rows were stored less, added back). A decode-only batch's kernel does both.
  p.row_params = kv.row_params.data;
  if (plan_.prefill.num_work == 0) {
    p.rotate_norm = hadamard_norm(g.head_dim);
    p.v_mean = kv.v_mean.ptr<const float>();
    attention_->run(p, plan_, fixed_.out.work_seq, fixed_.out.work_row0);
    return;
  }
  const size_t q_bytes = static_cast<size_t>(q.numel()) * 2;
  SERVE8_CHECK(q_bytes <= rotated_q_bytes_,
               "{}: {} tokens of q exceed the rotation buffer reserved for {} (reserve_steps)", op, batch.num_tokens,
               limits_.max_tokens);
  HadamardRowsParams h;
  h.x = q.data;
  h.out = rotated_q_;
  h.rows = batch.num_tokens * hq;
  h.heads = static_cast<int>(hq);
  h.group = group;
  h.head_dim = static_cast<int>(g.head_dim);
  h.norm = hadamard_norm(g.head_dim);
  launch_hadamard_rows(h, stream_);
  p.q = rotated_q_;
  attention_->run(p, plan_, fixed_.out.work_seq, fixed_.out.work_row0);
  h.x = h.out = out.data;
  h.mean = kv.v_mean.ptr<const float>();
  launch_hadamard_rows(h, stream_);
}

}  // namespace serve8
