// The CUDA backend's batch-shaped ops: upload_batch (fixed device buffers), kv_store and
// attention (checks, the host-side plan, the launches).
#include <algorithm>
#include <cmath>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_splits.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace serve8 {
namespace {

int64_t pow2_at_least(int64_t n, int64_t floor) {
  int64_t c = floor;
  while (c < n) c *= 2;
  return c;
}

// Where each int32 array of the batch sits in the batch buffer, for given capacities.
struct BatchLayout {
  int64_t tokens, positions, out_slots, token_seq, last_rows, qo_indptr, kv_indptr, kv_indices, end;
  BatchLayout(int64_t token_cap, int64_t seq_cap, int64_t kv_cap) {
    tokens = 0;
    positions = token_cap;
    out_slots = 2 * token_cap;
    token_seq = 3 * token_cap;
    last_rows = 4 * token_cap;
    qo_indptr = last_rows + seq_cap;
    kv_indptr = qo_indptr + seq_cap;
    kv_indices = kv_indptr + seq_cap;
    end = kv_indices + kv_cap;
  }
};

struct KvGeometry {
  int64_t num_slots, heads, head_dim;
};

KvGeometry check_kv_layer(const KvLayer& kv, const char* op) {
  SERVE8_CHECK(kv.k.ndim == 3, "{}: kv.k has shape {}, expected [slots, kv_heads, head_dim]", op, kv.k.shape_str());
  const KvGeometry g{kv.k.dim(0), kv.k.dim(1), kv.k.dim(2)};
  SERVE8_CHECK(kv.v.ndim == 3 && kv.v.dim(0) == g.num_slots && kv.v.dim(1) == g.heads && kv.v.dim(2) == g.head_dim &&
                   kv.v.dtype == kv.k.dtype,
               "{}: kv.v is {} {} but kv.k is {} {}", op, dtype_name(kv.v.dtype), kv.v.shape_str(),
               dtype_name(kv.k.dtype), kv.k.shape_str());
  switch (kv.k.dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kF32:  // with fp32 activations only (checked by the ops)
      break;
    case DType::kI32:
      fail("{}: KV storage dtype {} is not supported on CUDA (expected bf16, fp16, fp8_e5m2, fp8_e4m3 or fp32)", op,
           dtype_name(kv.k.dtype));
  }
  for (const Tensor* s : {&kv.k_scale, &kv.v_scale}) {
    SERVE8_CHECK(s->dtype == DType::kF32 && s->ndim == 1 && s->dim(0) == g.heads,
                 "{}: kv scales are {} {}, expected fp32 [{}]", op, dtype_name(s->dtype), s->shape_str(), g.heads);
  }
  return g;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

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
  if (bytes > capacity_) {
    SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued kernels may still read the old one
    if (host_) SERVE8_CUDA_CHECK(cudaFreeHost(host_));
    if (device_) SERVE8_CUDA_CHECK(cudaFree(device_));
    host_ = device_ = nullptr;
    capacity_ = 0;
    SERVE8_CUDA_CHECK(cudaMallocHost(&host_, bytes));
    SERVE8_CUDA_CHECK(cudaMalloc(&device_, bytes));
    capacity_ = bytes;
  }
  SERVE8_CUDA_CHECK(cudaEventSynchronize(copied_));
}

void StagedBuffer::upload(size_t bytes, cudaStream_t stream) {
  if (bytes) SERVE8_CUDA_CHECK(cudaMemcpyAsync(device_, host_, bytes, cudaMemcpyHostToDevice, stream));
  SERVE8_CUDA_CHECK(cudaEventRecord(copied_, stream));
}

DeviceBatch CudaBackend::upload_batch(const ForwardBatch& batch) {
  batch.validate();
  const int64_t t = batch.num_tokens(), b = batch.num_seqs();
  const int64_t nkv = static_cast<int64_t>(batch.kv_indices.size());
  SERVE8_CHECK(t <= INT32_MAX / 4 && nkv <= INT32_MAX / 2, "upload_batch: {} tokens and {} kv indices are too many", t,
               nkv);
  // Capacities only grow (powers of two), so buffer addresses stay put from step to step.
  token_cap_ = pow2_at_least(t, std::max<int64_t>(token_cap_, 256));
  seq_cap_ = pow2_at_least(b + 1, std::max<int64_t>(seq_cap_, 64));
  kv_cap_ = pow2_at_least(nkv, std::max<int64_t>(kv_cap_, 4096));
  const BatchLayout lay(token_cap_, seq_cap_, kv_cap_);
  batch_buf_.reserve(static_cast<size_t>(lay.end) * sizeof(int32_t), stream_);
  auto* host = reinterpret_cast<int32_t*>(batch_buf_.host());
  auto* dev = reinterpret_cast<int32_t*>(batch_buf_.device());
  std::copy(batch.tokens.begin(), batch.tokens.end(), host + lay.tokens);
  std::copy(batch.positions.begin(), batch.positions.end(), host + lay.positions);
  std::copy(batch.out_slots.begin(), batch.out_slots.end(), host + lay.out_slots);
  std::copy(batch.qo_indptr.begin(), batch.qo_indptr.end(), host + lay.qo_indptr);
  std::copy(batch.kv_indptr.begin(), batch.kv_indptr.end(), host + lay.kv_indptr);
  std::copy(batch.kv_indices.begin(), batch.kv_indices.end(), host + lay.kv_indices);
  DeviceBatch d;
  d.host = &batch;
  d.num_seqs = static_cast<int>(b);
  d.num_tokens = static_cast<int>(t);
  for (int64_t s = 0; s < b; ++s) {
    const int32_t q0 = batch.qo_indptr[static_cast<size_t>(s)], q1 = batch.qo_indptr[static_cast<size_t>(s + 1)];
    for (int32_t i = q0; i < q1; ++i) host[lay.token_seq + i] = static_cast<int32_t>(s);
    host[lay.last_rows + s] = q1 - 1;
    d.max_q_len = std::max(d.max_q_len, q1 - q0);
    d.max_kv_len =
        std::max(d.max_kv_len, batch.kv_indptr[static_cast<size_t>(s + 1)] - batch.kv_indptr[static_cast<size_t>(s)]);
  }
  batch_buf_.upload(static_cast<size_t>(lay.kv_indices + nkv) * sizeof(int32_t), stream_);
  d.tokens = Tensor(dev + lay.tokens, DType::kI32, {t});
  d.positions = Tensor(dev + lay.positions, DType::kI32, {t});
  d.out_slots = Tensor(dev + lay.out_slots, DType::kI32, {t});
  d.qo_indptr = Tensor(dev + lay.qo_indptr, DType::kI32, {b + 1});
  d.kv_indptr = Tensor(dev + lay.kv_indptr, DType::kI32, {b + 1});
  d.kv_indices = Tensor(dev + lay.kv_indices, DType::kI32, {nkv});
  d.last_token_rows = Tensor(dev + lay.last_rows, DType::kI32, {b});
  ++batch_generation_;
  batch_tokens_ = d.tokens.data;
  batch_token_seq_ = dev + lay.token_seq;
  return d;
}

void CudaBackend::check_current_batch(const DeviceBatch& batch, const char* op) const {
  SERVE8_CHECK(batch.host != nullptr && batch.tokens.data == batch_tokens_ && batch_generation_ > 0,
               "{}: the batch was not made by this backend's latest upload_batch", op);
}

// Slots index the pool without bounds checks in the kernels, so they are checked here, once per
// batch and pool size rather than once per layer.
void CudaBackend::check_slots(const DeviceBatch& batch, int64_t num_slots, const char* op) {
  if (slots_checked_generation_ == batch_generation_ && slots_checked_num_slots_ == num_slots) return;
  for (int32_t s : batch.host->out_slots) {
    SERVE8_CHECK(s >= 0 && s < num_slots, "{}: out slot {} is outside the pool's {} slots", op, s, num_slots);
  }
  for (int32_t s : batch.host->kv_indices) {
    SERVE8_CHECK(s >= 0 && s < num_slots, "{}: kv slot {} is outside the pool's {} slots", op, s, num_slots);
  }
  slots_checked_generation_ = batch_generation_;
  slots_checked_num_slots_ = num_slots;
}

void CudaBackend::kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) {
  const OpScope profile(profiler_, "kv_store");
  constexpr const char* op = "kv_store";
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
  check_slots(batch, g.num_slots, op);
  KvStoreParams p;
  p.dtype = k.dtype;
  p.k = k.data;
  p.v = v.data;
  p.out_slots = batch.out_slots.ptr<const int32_t>();
  p.k_pool = kv.k.data;
  p.v_pool = kv.v.data;
  p.k_scale = kv.k_scale.ptr<const float>();
  p.v_scale = kv.v_scale.ptr<const float>();
  p.num_tokens = batch.num_tokens;
  p.num_kv_heads = static_cast<int>(g.heads);
  p.head_dim = static_cast<int>(g.head_dim);
  p.kv_dtype = kv.k.dtype;
  launch_kv_store(p, stream_);
}

// The prefill work list (tiles of (token, group head) rows), heaviest KV range first so the
// long tiles start early; and whether any decode rows are present.
const CudaBackend::AttentionPlan& CudaBackend::plan_attention(const DeviceBatch& batch, int group) {
  if (plan_.generation == batch_generation_ && plan_.group == group) return plan_;
  const ForwardBatch& fb = *batch.host;
  const int tile_rows = prefill_tile_rows(prefill_kernel_);
  struct Item {
    int32_t kv_end, seq, row0;
  };
  std::vector<Item> items;
  bool has_decode = false;
  for (int b = 0; b < fb.num_seqs(); ++b) {
    const int q_len = fb.qo_indptr[static_cast<size_t>(b + 1)] - fb.qo_indptr[static_cast<size_t>(b)];
    const int kv_len = fb.kv_indptr[static_cast<size_t>(b + 1)] - fb.kv_indptr[static_cast<size_t>(b)];
    if (q_len == 1) {
      has_decode = true;
      continue;
    }
    const int rows = q_len * group;
    for (int r0 = 0; r0 < rows; r0 += tile_rows) {
      const int r_last = std::min(r0 + tile_rows, rows) - 1;
      items.push_back(Item{kv_len - q_len + r_last / group + 1, b, r0});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.kv_end > b.kv_end; });
  const size_t n = items.size();
  if (n > 0) {  // decode-only steps touch no buffer here, so they can be captured in a CUDA graph
    plan_buf_.reserve(std::max<size_t>(2 * n, 64) * sizeof(int32_t), stream_);
    auto* host = reinterpret_cast<int32_t*>(plan_buf_.host());
    for (size_t i = 0; i < n; ++i) {
      host[i] = items[i].seq;
      host[n + i] = items[i].row0;
    }
    plan_buf_.upload(2 * n * sizeof(int32_t), stream_);
  }
  plan_.generation = batch_generation_;
  plan_.group = group;
  plan_.num_work = static_cast<int>(n);
  plan_.has_decode = has_decode;
  return plan_;
}

void CudaBackend::attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale,
                            Tensor out) {
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
  if (batch.num_tokens == 0) return;
  check_slots(batch, g.num_slots, op);

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
  p.token_seq = batch_token_seq_;
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

  const AttentionPlan& plan = plan_attention(batch, group);
  if (plan.num_work > 0) {
    p.work_seq = reinterpret_cast<const int32_t*>(plan_buf_.device());
    p.work_row0 = p.work_seq + plan.num_work;
    p.num_work = plan.num_work;
    launch_attention_prefill(p, kv.k.dtype, prefill_kernel_, stream_);
  }
  if (plan.has_decode) {
    // A function of (B, Hkv) and the kernel only, so the grid of a CUDA-graph bucket is fixed; short sequences use
    // fewer splits inside the kernel.
    p.decode_heads = decode_heads_per_block(kv.k.dtype, decode_kernel_, batch.num_seqs, p.num_kv_heads,
                                            props_.multiProcessorCount, decode_heads_);
    const int base = batch.num_seqs * ((p.num_kv_heads + p.decode_heads - 1) / p.decode_heads);
    const int resident =
        decode_blocks_per_sm(kv.k.dtype, g.head_dim, decode_kernel_, p.decode_heads) * props_.multiProcessorCount;
    const DecodeSplitRule rule = decode_min_chunk_ > 0 ? DecodeSplitRule{decode_min_chunk_, 1}
                                                       : decode_split_rule(base, props_.multiProcessorCount);
    p.split_min_chunk = rule.min_chunk;
    p.split_min_count = rule.min_count;
    if (resident > 0 && decode_blocks_per_sm_ == 0) {
      p.num_splits = plan_decode_splits(base, resident, kDecodeMaxSplits);
    } else {
      const int target =
          (decode_blocks_per_sm_ > 0 ? decode_blocks_per_sm_ : kDecodeBlocksPerSm) * props_.multiProcessorCount;
      p.num_splits = std::clamp((target + base - 1) / base, 1, kDecodeMaxSplits);
    }
    if (p.num_splits > 1) {
      const size_t rows =
          static_cast<size_t>(p.num_splits) * static_cast<size_t>(batch.num_seqs) * static_cast<size_t>(hq);
      const size_t need = rows * static_cast<size_t>(g.head_dim + 1) * sizeof(float);
      if (need > split_workspace_bytes_) {
        SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (split_workspace_) SERVE8_CUDA_CHECK(cudaFree(split_workspace_));
        split_workspace_ = nullptr;
        split_workspace_bytes_ = 0;
        SERVE8_CUDA_CHECK(cudaMalloc(&split_workspace_, need));
        split_workspace_bytes_ = need;
      }
      p.partial_o = split_workspace_;
      p.partial_lse = split_workspace_ + rows * static_cast<size_t>(g.head_dim);
      // A counter per (sequence, block of KV heads); a launch with more (some 65k) merges in the
      // merge kernel instead.
      if (decode_merge_ == DecodeMerge::kFused && base <= kSplitCounters) p.split_counters = split_counters_;
    }
    p.dependent_launch = decode_dependent_launch_;
    launch_attention_decode(p, kv.k.dtype, decode_kernel_, stream_);
  }
}

}  // namespace serve8
