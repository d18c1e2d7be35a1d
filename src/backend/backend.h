// Backend: the one interface of ops the model graph runs on (DESIGN.md, "Backends and kernels").
//
// Two implementations: backend/cpu (the fp32 reference, used by CI and as the oracle of the CUDA
// kernels) and backend/cuda. Every op has exactly one entry point here; an implementation checks
// its tensors once at that entry point and dispatches over (dtype, KV dtype, head_dim, group) into
// templates. An unsupported combination throws serve8::Error, never runs a slow path.
//
// All tensors passed to ops live in the backend's memory (device memory for CUDA). Ops are
// asynchronous on the backend's stream; copy_to_host and synchronize wait.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/communicator.h"
#include "backend/kv_layout.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace serve8 {

// The shape of one forward step, as host arrays built by the engine. Sequences are laid out one
// after another. Sequence b has kv_len = kv_indptr[b+1] - kv_indptr[b] tokens in the KV cache
// after this step, of which the last q_len = qo_indptr[b+1] - qo_indptr[b] are new in this step
// (prefill/extend: q_len >= 1 over a cached prefix of kv_len - q_len tokens; decode: q_len == 1).
// New token i of sequence b attends causally to KV positions [0, kv_len - q_len + i].
//
// A sequence's pool slots live in its row of the KV cache's request -> slot table (req_rows[b]),
// on the device. The batch carries only what the table does not hold yet: the slots of the
// sequence's last n_b = new_slot_indptr[b+1] - new_slot_indptr[b] positions (n_b >= q_len: the new
// tokens' own slots, plus a prefix found in the radix cache when the row is new). So host work per
// decode step grows with the batch, not with the context.
struct ForwardBatch {
  std::vector<int32_t> tokens;           // [T] token ids of the new tokens
  std::vector<int32_t> positions;        // [T] their positions (RoPE)
  std::vector<int32_t> qo_indptr;        // [B+1]
  std::vector<int32_t> kv_indptr;        // [B+1]
  std::vector<int32_t> req_rows;         // [B] rows of the request -> slot table
  std::vector<int32_t> new_slot_indptr;  // [B+1]
  std::vector<int32_t> new_slots;        // slots of positions [kv_len - n_b, kv_len) of each sequence
  int num_seqs() const { return qo_indptr.empty() ? 0 : static_cast<int>(qo_indptr.size()) - 1; }
  int num_tokens() const { return static_cast<int>(tokens.size()); }
  void clear();
  // Appends a sequence on table row `row` that has kv_len tokens after this step: `tokens` are its
  // new ones (positions kv_len - tokens.size() on), `slots` the slots of its last slots.size()
  // positions, which the table does not hold yet (at least one per new token).
  void add_sequence(int32_t row, int kv_len, std::span<const int32_t> tokens, std::span<const int32_t> slots);
  // Throws serve8::Error if the arrays disagree (sizes, monotone indptrs, q_len <= n_b <= kv_len).
  void validate() const;
};

// A ForwardBatch in backend memory. Pointers are device pointers on CUDA. kv_indices is the
// CSR view of every sequence's slots (kv_indptr), read from the table after this step's new slots
// were written to it; out_slots are the new tokens' slots. Valid until the next upload_batch.
struct DeviceBatch {
  const ForwardBatch* host = nullptr;
  Tensor tokens, positions, out_slots, qo_indptr, kv_indptr, kv_indices;  // int32
  Tensor last_token_rows;  // [B] int32: row of each sequence's last new token (LM head input)
  int num_seqs = 0;
  int num_tokens = 0;
  int max_q_len = 0;
  int max_kv_len = 0;
};

// The most a step may carry, fixed at start-up: buffers the steps use are sized from it once, so a
// step allocates nothing and a captured CUDA graph's buffers never move.
struct StepLimits {
  int max_tokens = 0;  // new tokens in a step
  int max_seqs = 0;    // sequences in a step
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  // Elements of the largest weight-only FP8 matrix (0: none), for backends that widen such a
  // matrix for GEMMs of many rows (gemm_fp8_weights).
  int64_t fp8_weight_only_elems = 0;
};

// int8 and int4 store each row rotated by the Walsh-Hadamard transform of head_dim.
constexpr bool kv_dtype_is_rotated(DType t) { return t == DType::kI8 || t == DType::kI4; }

// The last dimension of a pool's K/V tensors: head_dim elements, or head_dim / 2 bytes of int4
// (two codes a byte).
constexpr int64_t kv_pool_width(DType t, int64_t head_dim) { return t == DType::kI4 ? head_dim / 2 : head_dim; }

// KV cache geometry. Storage dtype is one of fp32 (CPU, or CUDA with fp32 compute), bf16, fp16,
// fp8_e5m2, fp8_e4m3, int8, int4 (on CUDA: head_dim 64 or 128).
struct KvCacheConfig {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kBF16;
  int64_t num_slots = 0;  // slot 0 is reserved by the allocator (kv/), but has storage; whole pages are stored
  // The request -> slot table: rows for this many requests at once, each up to max_context_len
  // slots; one more row (padding_row()) serves the padded rows of CUDA-graph steps.
  int max_requests = 64;
  int max_context_len = 4096;
  int padding_row() const { return max_requests; }
  // K and V, with each row's own scale (and minimum) for the integer formats.
  size_t bytes_per_token() const { return 2ull * num_layers * num_kv_heads * kv_row_bytes(dtype, head_dim); }

  // One stored row of head_dim values, and its own parameters (kv_row_param_bytes).
  static constexpr size_t kv_row_bytes(DType t, int head_dim) {
    return static_cast<size_t>(kv_pool_width(t, head_dim)) * dtype_size(t) + static_cast<size_t>(kv_row_param_bytes(t));
  }
};

// Scales of the stored values: stored = value / scale, value = stored * scale. One scale per
// layer and KV head ([num_layers * num_kv_heads], layer-major); a per-layer scale is repeated
// over the heads. All 1.0 for formats that need none.
struct KvScales {
  std::vector<float> k, v;
  // Rotated formats only, optional (empty: zero): each KV head's mean K and V row, after RoPE and
  // before the scale, [num_layers * num_kv_heads * head_dim] layer-major. Rows are stored less
  // their head's mean: q . mean is the same for every key, so softmax does not change, and V's
  // mean is added back to the attention output. Centred rows take finer int4 steps.
  std::vector<float> k_mean, v_mean;
  static KvScales ones(int num_layers, int num_kv_heads);
};

// Throws serve8::Error unless the geometry is positive and there is one finite, positive K and V
// scale per layer and KV head. Both backends' KV caches check their arguments with it.
void check_kv_cache_args(const KvCacheConfig& config, const KvScales& scales);

// Throws serve8::Error unless the batch's table rows, lengths and new slots fit the KV cache
// (upload_batch of both backends checks with it).
void check_batch_fits(const ForwardBatch& batch, const KvCacheConfig& config);

// One layer's slice of the pool, as the kernels see it.
struct KvLayer {
  // [pages, num_kv_heads, kKvPageSize, head_dim] in the storage dtype (int4: head_dim / 2 bytes):
  // slot s of head h is row kv_row(s, h, num_kv_heads) (backend/kv_layout.h).
  Tensor k, v;
  Tensor k_scale, v_scale;  // [num_kv_heads] fp32
  // Each stored row's parameters, K's then V's per row pair (one read serves both), in the rows'
  // order, fp16: int8 [pages, num_kv_heads, kKvPageSize, 2], the K and V rows' scales; int4
  // [..., 4], K's scale and minimum, then V's; written by kv_store with the rows;
  // empty for the other dtypes. Both hold the row rotated by the orthonormal Walsh-Hadamard
  // transform H of head_dim: value = H (stored * row scale [+ row minimum]) * the head's scale +
  // the head's mean.
  Tensor row_params;
  Tensor k_mean, v_mean;  // int8 and int4: [num_kv_heads, head_dim] fp32 (zeros when none given)
};

// The KV pool's storage (one buffer per layer for K and for V) and the request -> slot table,
// owned by the backend.
class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual const KvCacheConfig& config() const = 0;
  virtual KvLayer layer(int i) const = 0;
  // [max_requests + 1, max_context_len] int32: row r's first entries are request r's slots in
  // position order (written by upload_batch from the batches' new slots).
  virtual Tensor req_to_token() const = 0;
  // Replaces the scales (E4M3 calibration); sizes as KvScales.
  virtual void set_scales(const KvScales& scales) = 0;
};

// Per-row sampling controls. temperature == 0 means greedy (argmax, lowest id on ties).
// top_k <= 0 and top_p >= 1 and min_p <= 0 disable those filters. The random draw of row r at
// step s is a pure function of (seed, step), so a request samples the same tokens whatever else
// is in the batch.
struct SamplingRow {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = -1;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t step = 0;
};

// One change to one logit before sampling (penalties, logit bias, min_new_tokens):
// logits[row][token] = (x > 0 ? x * mul_pos : x * mul_neg) + add. A (row, token) appears once.
struct LogitEdit {
  int32_t row = 0;
  int32_t token = 0;
  float mul_pos = 1.0f;
  float mul_neg = 1.0f;
  float add = 0.0f;
};

// One row's log probabilities at temperature 1 (the log-softmax of its logits, NaN logits left
// out): the chosen token's, and the top_n most likely tokens (id, logprob), most likely first,
// the lower id first on ties.
struct RowLogprobs {
  float chosen = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};
RowLogprobs row_logprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n);

// The uniform draw in [0, 1) used by every sampler for (seed, step): counter-based, shared by host
// and device code so the CPU and CUDA samplers pick the same token from the same distribution.
SERVE8_HD float sampling_uniform(uint64_t seed, uint64_t step) {
  // splitmix64 over a combination of the two counters.
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + step + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // 24 random bits
}

// A recorded sequence of ops that replays with the same buffers and shapes (a CUDA graph). The
// tensors the ops read and write must stay where they were at capture; only their contents change.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void replay() = 0;
};

// Device time spent in one op, summed over the calls since profiling was switched on.
struct OpTime {
  std::string op;
  double ms = 0.0;
  int64_t calls = 0;
};

// One kernel's run on the device (bench-one-batch's trace of graph-mode steps), in the tracer's
// clock; name is the kernel's function name without namespaces, template or parameters.
struct KernelSpan {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
};

// Charges each kernel the time from the later of its start and every earlier kernel's end to its
// own end, so that overlapping kernels (programmatic launches) are not counted twice and the
// charges add up to the time the device was busy; summed per name, heaviest first.
std::vector<OpTime> charge_kernel_time(std::vector<KernelSpan> spans);

// An op's output as FP8 rows too, q [R, K] e4m3 and scale [R] fp32: the bytes
// quantize_fp8_rows(out) would write, made by the op that writes out (no second pass over it).
struct Fp8Rows {
  Tensor q;
  Tensor scale;
};

// How a backend with GEMM kernels of its own and a library's picks one for a decode shape
// (--gemm-tuning): kAuto times the shapes its measured table lacks for this device, kAll every
// shape (the table set aside), kOff takes the table and otherwise the defaults.
enum class GemmTuning { kAuto, kAll, kOff };
GemmTuning parse_gemm_tuning(const std::string& name);  // "auto" | "all" | "off"

// One decode GEMM shape timed both ways, per launch, back to back over the layers' own weights.
struct GemmTiming {
  int64_t n = 0, k = 0, m = 0;  // weights [n, k], m token rows
  bool fp8 = false;             // e4m3 tokens and weights, else bf16
  int layers = 0;               // launches timed (distinct weight matrices)
  double ours_us = 0.0, library_us = 0.0;
  bool library = false;  // the library's kernel was chosen (faster by more than 3%)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // Weights and activations: fp32 on CPU; bf16 (default) or fp32 (--dtype float32) on CUDA.
  virtual DType compute_dtype() const = 0;
  virtual std::string device_description() const = 0;

  // Memory. alloc returns zero-filled memory.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;  // waits for pending work
  virtual void synchronize() = 0;
  // Bytes of memory the backend could still allocate (the pool sizes itself from it); 0 if unknown.
  virtual size_t free_memory() const = 0;
  // Bytes of memory the device has in all (--mem-fraction-static is a fraction of it); 0 if unknown.
  virtual size_t total_memory() const { return 0; }

  virtual std::unique_ptr<KvCache> create_kv_cache(const KvCacheConfig& config, const KvScales& scales) = 0;
  // Sizes what steps use (batch buffers, attention workspaces) for steps within `limits`; call at
  // start-up, before the first upload_batch (the model does, when it is made). May wait for the
  // device; later calls only grow.
  virtual void reserve_steps(const StepLimits& limits) = 0;
  // Writes the batch's new slots into kv's request -> slot table and copies the batch into backend
  // memory (fixed buffers on CUDA, so a captured graph replays it). Throws if it exceeds the
  // limits given to reserve_steps or kv's table.
  virtual DeviceBatch upload_batch(const ForwardBatch& batch, KvCache& kv) = 0;

  // ---- ops; shapes in brackets, T = tokens in the step, B = sequences ----
  // out[t] = table[ids[t]]; table [V, H], out [T, H].
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * weight, per row; x, out [T, H]; weight [H].
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) = 0;
  // residual += x; out = rmsnorm(residual) (the fused residual add between sub-layers). With fp8,
  // also the FP8 rows of out for the FP8 GEMM that reads them (see Fp8Rows).
  virtual void add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out,
                           const Fp8Rows* fp8 = nullptr) = 0;
  // out[M, N] = x[M, K] · w[N, K]^T (+ bias[N]). out may be fp32 when x is bf16/fp16 (logits).
  virtual void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) = 0;
  // FP8 rows: scale[r] = max|x[r]| / 448 (1 for a zero row), q[r] = e4m3(x[r] * 448 / max|x[r]|),
  // rounded and saturated as core/dtype.h does, so every backend gives the same bytes. x [R, K] in
  // the compute dtype (weights at load, per output channel; activations per token); q [R, K] e4m3.
  virtual void quantize_fp8_rows(const Tensor& x, Tensor q, Tensor scale) = 0;
  // out[M, N] = (xq[M, K] · wq[N, K]^T) * x_scale[M] * w_scale[N] (+ bias[N]); e4m3 operands, fp32
  // accumulation, out in the compute dtype.
  virtual void gemm_fp8(const Tensor& xq, const Tensor& x_scale, const Tensor& wq, const Tensor& w_scale,
                        const Tensor* bias, Tensor out) = 0;
  // Weight-only FP8 (checkpoints without input quantization): out[M, N] = (x[M, K] · wq[N, K]^T) *
  // w_scale[N] (+ bias[N]); x and out in the compute dtype, fp32 accumulation. Backends without it
  // throw naming the op, and say so in has_gemm_fp8_weights() for the loader to refuse early.
  virtual void gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                                Tensor out);
  virtual bool has_gemm_fp8_weights() const { return false; }
  // Rotates q [T, Hq, D] and k [T, Hkv, D] in place by positions [T], HF "rotate half" layout
  // (pairs (i, i + D/2)); inv_freq [D/2] fp32 holds the (possibly llama3-scaled) frequencies.
  virtual void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) = 0;
  // Writes k, v [T, Hkv, D] into the layer's pool at batch.out_slots: divide by the scale,
  // saturate and convert to the storage dtype (core/dtype.h, bit for bit), in one pass.
  virtual void kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) = 0;
  // rope then kv_store on one QKV GEMM's output: qkv [T, Hq + 2 Hkv, D] holds each token's q, k and
  // v heads in one row. q's heads are rotated into q [T, Hq, D], k's in place; k and v go into the
  // pool. One op, so that a backend reads the row once.
  virtual void rope_kv_store(Tensor qkv, Tensor q, const Tensor& positions, const Tensor& inv_freq,
                             const DeviceBatch& batch, const KvLayer& kv) = 0;
  // Paged attention over the pool for every new token of the batch (prefill/extend and decode
  // rows alike; see ForwardBatch). q, out [T, Hq, D]; Hq = group * Hkv. Reads the pool in its
  // storage dtype, dequantizes in registers; k_scale folds into the softmax scale, v_scale into
  // the output.
  virtual void attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale,
                         Tensor out) = 0;
  // out[T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]; with fp8, also out's FP8 rows.
  virtual void silu_mul(const Tensor& gate_up, Tensor out, const Fp8Rows* fp8 = nullptr) = 0;
  // out[i] = x[rows[i]]; rows int32.
  virtual void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) = 0;
  // Picks one token per row of logits [B, V] (fp32); writes B ids to out_ids (host memory).
  virtual void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids) = 0;
  // Applies `edits` (LogitEdit) to logits [B, V] fp32 in place, before sample().
  virtual void edit_logits(Tensor logits, std::span<const LogitEdit> edits) = 0;
  // Constrained decoding: logits[rows[i]][t] = -inf for every token t whose bit is clear in row i
  // of `allowed` (host memory, ceil(V / 32) int32 words a row; bit t % 32 of word t / 32).
  virtual void mask_logits(Tensor logits, std::span<const int32_t> rows, std::span<const int32_t> allowed) = 0;
  // RowLogprobs of rows[i] of logits [B, V] fp32 for token chosen[i] (the logits sample() saw).
  virtual std::vector<RowLogprobs> logprobs(const Tensor& logits, std::span<const int32_t> rows,
                                            std::span<const int32_t> chosen, int top_n) = 0;

  // ---- step graphs and profiling (optional) ----
  // Records the ops `body` issues, without running them, into a graph; nullptr where the backend
  // has no graphs (CPU). body must not upload batches, allocate, or wait for the device.
  virtual std::unique_ptr<StepGraph> capture(const std::function<void()>& body) {
    (void)body;
    return nullptr;
  }
  // Per-op device time (bench-one-batch's breakdown of a step). Switching on clears the totals;
  // op_profile() waits for the device and returns them, heaviest first. Empty where unsupported.
  virtual void set_op_profiling(bool on) { (void)on; }
  virtual std::vector<OpTime> op_profile() { return {}; }
  // Records the kernels run from set_kernel_tracing(true) to kernel_trace(), graphs included;
  // kernel_trace() waits for the device, stops and returns them. Throws where unsupported.
  virtual void set_kernel_tracing(bool on);
  virtual std::vector<KernelSpan> kernel_trace() { return {}; }

  // ---- GEMM choice (optional) ----
  virtual void set_gemm_tuning(GemmTuning mode) { (void)mode; }
  // Around a decode step's warm-up forward (before its graph is captured): the GEMMs issued in
  // between run as usual and are noted; end_gemm_tuning() times each noted shape with each kernel,
  // keeps the faster for later steps and returns the timings (empty where nothing was timed).
  virtual void begin_gemm_tuning() {}
  virtual std::vector<GemmTiming> end_gemm_tuning() { return {}; }

  // ---- tensor parallelism (optional; the default throws, naming the backend) ----
  // Communicators for ranks 0..n-1, each rank on its own backend of this kind; all_reduce_sum
  // takes up to max_reduce_elems elements a call.
  virtual std::vector<std::unique_ptr<Communicator>> create_communicators(int n, int64_t max_reduce_elems);
  // Throws, naming what is missing, where create_communicators(n, ...) would; makes nothing, so a
  // group is refused before any weights load.
  virtual void check_communicators(int n) const;
  // A vocabulary-parallel embedding: table [V_r, H] holds the rows of ids [first_id, first_id +
  // V_r); out[t] = table[ids[t] - first_id] for ids inside it, zeros for the rest (their rank adds
  // them in the all-reduce that follows).
  virtual void embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out);
};

// Owning handle of backend memory, freed on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& backend, size_t bytes)
      : backend_(&backend), data_(bytes ? backend.alloc(bytes) : nullptr), bytes_(bytes) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      data_ = o.data_;
      bytes_ = o.bytes_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Tensor view(DType t, std::initializer_list<int64_t> dims) const { return Tensor(data_, t, dims); }
  void reset() {
    if (data_) backend_->free(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Creates "cpu" or "cuda" (throws where CUDA was not built or no GPU is present), computing in
// the device's default dtype (fp32 on CPU, bf16 on CUDA) or in `compute`: the CPU backend takes
// fp32 only, CUDA bf16 or fp32; anything else throws, naming --dtype. index: which GPU (a
// tensor-parallel rank's; -1 the current one), ignored on the CPU.
std::unique_ptr<Backend> create_backend(const std::string& device);
std::unique_ptr<Backend> create_backend(const std::string& device, DType compute, int index = -1);
bool cuda_available();

}  // namespace serve8
