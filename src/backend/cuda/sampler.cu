#include <algorithm>
#include <climits>
#include <cub/cub.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampler.h"

namespace serve8 {
namespace {

constexpr int kThreads = 512;
// Sort at most this many (key, id) pairs at once: 4 arrays of 4 bytes, about 128 MiB.
constexpr int64_t kSortElements = int64_t{8} << 20;

// The best (value, id) so far: larger value, then lower id; id < 0 is "none".
struct Best {
  float v;
  int id;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.id < 0) return b;
  if (b.id < 0) return a;
  if (a.v > b.v) return a;
  if (b.v > a.v) return b;
  return a.id < b.id ? a : b;
}

__device__ Best block_best(Best x, Best* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best y{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.id, o)};
    x = better(x, y);
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : Best{0.0f, -1};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best y{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.id, o)};
    x = better(x, y);
  }
  return x;
}

using BlockReduceD = cub::BlockReduce<double, kThreads>;
using BlockReduceI = cub::BlockReduce<int, kThreads>;
using BlockScanD = cub::BlockScan<double, kThreads>;

__device__ void decide(const SampleParams& p, int row, int token) {
  p.state[row].decided = 1;
  p.out[row] = token;
}

// One block's results over its slice of a row, in SampleParams::parts.
struct Part {
  Best best, zbest;
  double total;
  int count;
};

// The block's slice of its row: split_len (a multiple of 4) logits from blockIdx.x's start.
__device__ __forceinline__ int64_t slice_begin(const SampleParams& p) { return blockIdx.x * p.split_len; }
__device__ __forceinline__ int64_t slice_end(const SampleParams& p) {
  return min(p.vocab, (blockIdx.x + 1) * p.split_len);
}

// True in the last of the row's blocks to finish, once every block's part is visible; it resets
// the row's count for the next kernel.
__device__ bool last_of_row(const SampleParams& p, int row) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(p.done + row, 1) == static_cast<int>(gridDim.x) - 1;
    if (last) p.done[row] = 0;
  }
  __syncthreads();
  return last;
}

__device__ __forceinline__ Best load_best(const Best* b) { return Best{__ldcg(&b->v), __ldcg(&b->id)}; }

// Calls f(value, id) over the block's slice of a row: float4 loads where the row allows them.
template <bool kVec, typename F>
__device__ __forceinline__ void for_slice(const SampleParams& p, const float* logits, F&& f) {
  const int64_t end = slice_end(p);
  if constexpr (kVec) {
#pragma unroll 2
    for (int64_t i = slice_begin(p) + 4 * threadIdx.x; i < end; i += 4 * kThreads) {
      const float4 v = *reinterpret_cast<const float4*>(logits + i);
      f(v.x, i);
      f(v.y, i + 1);
      f(v.z, i + 2);
      f(v.w, i + 3);
    }
  } else {
    for (int64_t i = slice_begin(p) + threadIdx.x; i < end; i += kThreads) f(logits[i], i);
  }
}

// Step 1, grid (slices, rows): the greedy answer and max z. Greedy rows are decided here.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) sample_max_kernel(const SampleParams p) {
  __shared__ Best scratch[32];
  const int row = p.row_begin + static_cast<int>(blockIdx.y);
  const SampleRowParams rp = p.rows[row];
  const bool greedy = rp.temperature == 0.0f;
  Best best{0.0f, -1}, zbest{0.0f, -1};
  for_slice<kVec>(p, p.logits + int64_t{row} * p.vocab, [&](float v, int64_t i) {
    if (isnan(v)) return;
    best = better(best, Best{v, static_cast<int>(i)});
    if (!greedy) {
      const float z = v / rp.temperature;
      if (!isnan(z)) zbest = better(zbest, Best{z, static_cast<int>(i)});
    }
  });
  best = block_best(best, scratch);
  if (!greedy) zbest = block_best(zbest, scratch);
  Part* parts = static_cast<Part*>(p.parts) + int64_t{row} * gridDim.x;
  if (threadIdx.x == 0) {
    parts[blockIdx.x].best = best;
    parts[blockIdx.x].zbest = zbest;
  }
  if (!last_of_row(p, row)) return;
  // The order of (value, id) is total, so the slices combine in any order to the same answer.
  best = zbest = Best{0.0f, -1};
  for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(gridDim.x); i += kThreads) {
    best = better(best, load_best(&parts[i].best));
    zbest = better(zbest, load_best(&parts[i].zbest));
  }
  best = block_best(best, scratch);
  zbest = block_best(zbest, scratch);
  if (threadIdx.x != 0) return;
  if (greedy || zbest.id < 0 || !(zbest.v > -INFINITY)) {
    decide(p, row, best.id < 0 ? 0 : best.id);
    return;
  }
  p.state[row].max_z = zbest.v;
  p.state[row].max_z_id = zbest.id;
  p.state[row].decided = 0;
}

// Step 1b, grid (slices, rows), sampled rows only: e_i, the candidates' keys, the total and the
// count. The last block adds the slices' sums in slice order.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) sample_weights_kernel(const SampleParams p) {
  __shared__ union {
    BlockReduceD::TempStorage d;
    BlockReduceI::TempStorage i;
  } temp;
  const int row = p.row_begin + static_cast<int>(blockIdx.y);
  const SampleRowParams rp = p.rows[row];
  if (rp.temperature == 0.0f || p.state[row].decided) return;  // the same for every block of the row
  const float m = p.state[row].max_z;
  float* keys = p.keys + int64_t{rp.segment} * p.vocab;
  int32_t* ids = p.ids + int64_t{rp.segment} * p.vocab;
  double total = 0.0;
  int count = 0;
  for_slice<kVec>(p, p.logits + int64_t{row} * p.vocab, [&](float v, int64_t i) {
    const float z = v / rp.temperature;
    const float e = z == m ? 1.0f : (isnan(z) ? 0.0f : expf(z - m));
    total += e;
    const bool cand = e > 0.0f && (rp.min_p <= 0.0f || e >= rp.min_p);
    count += cand;
    keys[i] = cand ? e : 0.0f;
    ids[i] = static_cast<int32_t>(i);
  });
  total = BlockReduceD(temp.d).Sum(total);
  __syncthreads();
  count = BlockReduceI(temp.i).Sum(count);
  Part* parts = static_cast<Part*>(p.parts) + int64_t{row} * gridDim.x;
  if (threadIdx.x == 0) {
    parts[blockIdx.x].total = total;
    parts[blockIdx.x].count = count;
  }
  if (!last_of_row(p, row) || threadIdx.x != 0) return;
  total = 0.0;
  count = 0;
  for (int i = 0; i < static_cast<int>(gridDim.x); ++i) {
    total += __ldcg(&parts[i].total);
    count += __ldcg(&parts[i].count);
  }
  p.state[row].total = total;
  p.state[row].num_candidates = count;
  // min_p > 1 dropped even the top token: the first at the maximum.
  if (count == 0) decide(p, row, p.state[row].max_z_id);
}

// The first i < n whose inclusive prefix sum of keys satisfies `pred` (monotone, keys >= 0), or
// INT_MAX. Prefix sums in double.
template <typename Pred>
__device__ int scan_first(const float* keys, int n, Pred pred, BlockScanD::TempStorage& temp, int& s_first,
                          double& s_carry) {
  __syncthreads();
  if (threadIdx.x == 0) s_first = INT_MAX;
  double carry = 0.0;
  for (int base = 0; base < n; base += kThreads) {
    __syncthreads();
    const int i = base + threadIdx.x;
    const double e = i < n ? static_cast<double>(keys[i]) : 0.0;
    double inc;
    BlockScanD(temp).InclusiveSum(e, inc);
    inc += carry;
    if (i < n && pred(inc)) atomicMin(&s_first, i);
    if (threadIdx.x == kThreads - 1) s_carry = inc;
    __syncthreads();
    carry = s_carry;
    if (s_first != INT_MAX) break;
  }
  __syncthreads();
  return s_first;
}

// Step 3: cut and draw over one sorted row.
__global__ void __launch_bounds__(kThreads) sample_draw_kernel(const SampleParams p, int segment_begin) {
  __shared__ union {
    BlockScanD::TempStorage scan;
    BlockReduceD::TempStorage reduce;
  } temp;
  __shared__ int s_first;
  __shared__ double s_carry;
  const int seg = blockIdx.x;
  const int row = p.segment_rows[segment_begin + seg];
  const SampleRowState st = p.state[row];
  if (st.decided) return;
  const SampleRowParams rp = p.rows[row];
  const float* keys = p.sorted_keys + int64_t{seg} * p.vocab;
  const int32_t* ids = p.sorted_ids + int64_t{seg} * p.vocab;
  int n = st.num_candidates;
  if (rp.top_k > 0 && rp.top_k < n) n = rp.top_k;
  if (rp.top_p < 1.0f) {
    const double threshold = static_cast<double>(rp.top_p) * st.total;
    const int first = scan_first(
        keys, n, [threshold](double cum) { return cum >= threshold; }, temp.scan, s_first, s_carry);
    if (first != INT_MAX) n = first + 1;
  }
  double kept = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) kept += keys[i];
  __syncthreads();
  kept = BlockReduceD(temp.reduce).Sum(kept);
  if (threadIdx.x == 0) s_carry = kept;
  __syncthreads();
  const double target = static_cast<double>(rp.u) * s_carry;
  const int first = scan_first(
      keys, n, [target](double cum) { return cum > target; }, temp.scan, s_first, s_carry);
  if (threadIdx.x == 0) p.out[row] = ids[first != INT_MAX ? first : n - 1];
}

__global__ void fill_offsets_kernel(int* offsets, int count, int64_t vocab) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i <= count; i += blockDim.x * gridDim.x)
    offsets[i] = static_cast<int>(i * vocab);
}

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

namespace {

// One thread per edit; a (row, token) appears once, so edits never race. Rounded multiply, then
// add (no fused multiply-add), as the CPU backend computes it.
__global__ void edit_logits_kernel(float* logits, int64_t vocab, const LogitEdit* edits, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const LogitEdit e = edits[i];
  float* x = logits + e.row * vocab + e.token;
  *x = __fadd_rn(__fmul_rn(*x, *x > 0.0f ? e.mul_pos : e.mul_neg), e.add);
}

}  // namespace

CudaSampler::~CudaSampler() {
  if (edits_) cudaFree(edits_);
  if (masks_) cudaFree(masks_);
  if (rows_) cudaFree(rows_);
  if (sort_) cudaFree(sort_);
  if (temp_) cudaFree(temp_);
  if (parts_) cudaFree(parts_);
  if (done_) cudaFree(done_);
  if (host_out_) cudaFreeHost(host_out_);
}

void CudaSampler::reserve(void*& ptr, size_t& have, size_t want) {
  if (want <= have) return;
  if (ptr) {
    SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer may still be in use
    SERVE8_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    have = 0;
  }
  SERVE8_CUDA_CHECK(cudaMalloc(&ptr, want));
  have = want;
}

void CudaSampler::edit(float* logits, int64_t vocab, std::span<const LogitEdit> edits) {
  if (edits.empty()) return;
  reserve(edits_, edits_bytes_, edits.size_bytes());
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(edits_, edits.data(), edits.size_bytes(), cudaMemcpyHostToDevice, stream_));
  const int n = static_cast<int>(edits.size());
  edit_logits_kernel<<<(n + 255) / 256, 256, 0, stream_>>>(logits, vocab, static_cast<const LogitEdit*>(edits_), n);
  SERVE8_CUDA_CHECK_LAUNCH("edit_logits_kernel");
}

// Grid (row, chunk of tokens): a thread per token clears the logit its row's mask forbids.
__global__ void mask_logits_kernel(float* logits, int64_t vocab, const int32_t* rows, const uint32_t* allowed,
                                   int64_t words) {
  const int64_t t = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (t >= vocab) return;
  const uint32_t w = allowed[blockIdx.x * words + t / 32];
  if (!((w >> (t % 32)) & 1u)) logits[rows[blockIdx.x] * vocab + t] = -INFINITY;
}

void CudaSampler::mask(float* logits, int64_t vocab, std::span<const int32_t> rows, std::span<const int32_t> allowed) {
  if (rows.empty()) return;
  reserve(masks_, masks_bytes_, rows.size_bytes() + allowed.size_bytes());
  auto* d_rows = static_cast<int32_t*>(masks_);
  auto* d_allowed = reinterpret_cast<uint32_t*>(d_rows + rows.size());
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(d_rows, rows.data(), rows.size_bytes(), cudaMemcpyHostToDevice, stream_));
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(d_allowed, allowed.data(), allowed.size_bytes(), cudaMemcpyHostToDevice, stream_));
  const dim3 grid(static_cast<unsigned>(rows.size()), static_cast<unsigned>((vocab + 255) / 256));
  mask_logits_kernel<<<grid, 256, 0, stream_>>>(logits, vocab, d_rows, d_allowed, (vocab + 31) / 32);
  SERVE8_CUDA_CHECK_LAUNCH("mask_logits_kernel");
}

void CudaSampler::sample(const float* logits, int64_t num_rows, int64_t vocab, const std::vector<SamplingRow>& rows,
                         int32_t* out_ids) {
  if (num_rows == 0) return;
  const int b = static_cast<int>(num_rows);
  const int max_segments = static_cast<int>(std::max<int64_t>(1, kSortElements / vocab));

  // Host side: per-row parameters, and chunks of rows holding at most max_segments sampled rows.
  std::vector<SampleRowParams> params(static_cast<size_t>(b));
  std::vector<int32_t> segment_rows;
  struct Chunk {
    int row_begin, num_rows, segment_begin, num_segments;
  };
  std::vector<Chunk> chunks;
  Chunk cur{0, 0, 0, 0};
  for (int r = 0; r < b; ++r) {
    const SamplingRow& s = rows[static_cast<size_t>(r)];
    SampleRowParams& q = params[static_cast<size_t>(r)];
    q.temperature = s.temperature;
    q.top_p = s.top_p;
    q.min_p = s.min_p;
    q.top_k = s.top_k;
    q.u = sampling_uniform(s.seed, s.step);
    if (s.temperature != 0.0f) {
      if (cur.num_segments == max_segments) {
        chunks.push_back(cur);
        cur = Chunk{r, 0, static_cast<int>(segment_rows.size()), 0};
      }
      q.segment = cur.num_segments++;
      segment_rows.push_back(r);
    }
    ++cur.num_rows;
  }
  chunks.push_back(cur);
  const int total_segments = static_cast<int>(segment_rows.size());

  const size_t params_bytes = align_up(sizeof(SampleRowParams) * b);
  const size_t state_bytes = align_up(sizeof(SampleRowState) * b);
  const size_t segrows_bytes = align_up(sizeof(int32_t) * std::max(1, total_segments));
  const size_t out_bytes = align_up(sizeof(int32_t) * b);
  reserve(rows_, rows_bytes_, params_bytes + state_bytes + segrows_bytes + out_bytes);
  char* base = static_cast<char*>(rows_);
  SampleParams p;
  p.logits = logits;
  p.rows = reinterpret_cast<const SampleRowParams*>(base);
  p.state = reinterpret_cast<SampleRowState*>(base + params_bytes);
  p.segment_rows = reinterpret_cast<const int32_t*>(base + params_bytes + state_bytes);
  p.out = reinterpret_cast<int32_t*>(base + params_bytes + state_bytes + segrows_bytes);
  p.vocab = vocab;
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(base, params.data(), sizeof(SampleRowParams) * b, cudaMemcpyHostToDevice, stream_));
  if (total_segments > 0) {
    SERVE8_CUDA_CHECK(cudaMemcpyAsync(base + params_bytes + state_bytes, segment_rows.data(),
                                      sizeof(int32_t) * total_segments, cudaMemcpyHostToDevice, stream_));
    const int segs = std::min(max_segments, total_segments);
    const size_t pairs = static_cast<size_t>(segs) * static_cast<size_t>(vocab);
    const size_t arr = align_up(pairs * 4);
    reserve(sort_, sort_bytes_, 4 * arr + align_up(sizeof(int) * (segs + 1)));
    char* s = static_cast<char*>(sort_);
    p.keys = reinterpret_cast<float*>(s);
    p.ids = reinterpret_cast<int32_t*>(s + arr);
    float* sorted_keys = reinterpret_cast<float*>(s + 2 * arr);
    int32_t* sorted_ids = reinterpret_cast<int32_t*>(s + 3 * arr);
    p.sorted_keys = sorted_keys;
    p.sorted_ids = sorted_ids;
    int* offsets = reinterpret_cast<int*>(s + 4 * arr);
    fill_offsets_kernel<<<ceil_div(segs + 1, 256), 256, 0, stream_>>>(offsets, segs, vocab);
    SERVE8_CUDA_CHECK_LAUNCH("fill_offsets_kernel");
    size_t temp_need = 0;
    SERVE8_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, temp_need, p.keys, sorted_keys, p.ids,
                                                                         sorted_ids, static_cast<int64_t>(pairs), segs,
                                                                         offsets, offsets + 1, 0, 32, stream_));
    reserve(temp_, temp_bytes_, std::max<size_t>(temp_need, 256));
  }

  // Slices of about 4,096 logits, at most 64 a row, their count a function of the vocabulary only.
  const int64_t want_splits = std::clamp<int64_t>((vocab + 4095) / 4096, 1, 64);
  p.split_len = ((vocab + want_splits - 1) / want_splits + 3) / 4 * 4;
  const auto splits = static_cast<unsigned>((vocab + p.split_len - 1) / p.split_len);
  reserve(parts_, parts_bytes_, sizeof(Part) * splits * static_cast<size_t>(b));
  p.parts = parts_;
  if (done_bytes_ < sizeof(int) * static_cast<size_t>(b)) {
    reserve(done_, done_bytes_, sizeof(int) * static_cast<size_t>(b));
    SERVE8_CUDA_CHECK(cudaMemsetAsync(done_, 0, done_bytes_, stream_));
  }
  p.done = static_cast<int*>(done_);
  const bool vec = vocab % 4 == 0 && aligned16(logits);
  const auto max_kernel = vec ? sample_max_kernel<true> : sample_max_kernel<false>;
  const auto weights_kernel = vec ? sample_weights_kernel<true> : sample_weights_kernel<false>;
  for (const Chunk& c : chunks) {
    if (c.num_rows == 0) continue;
    p.row_begin = c.row_begin;
    const dim3 grid(splits, static_cast<unsigned>(c.num_rows));
    max_kernel<<<grid, kThreads, 0, stream_>>>(p);
    SERVE8_CUDA_CHECK_LAUNCH("sample_max_kernel");
    if (c.num_segments == 0) continue;
    weights_kernel<<<grid, kThreads, 0, stream_>>>(p);
    SERVE8_CUDA_CHECK_LAUNCH("sample_weights_kernel");
    const int64_t pairs = int64_t{c.num_segments} * vocab;
    const int* offsets = reinterpret_cast<const int*>(
        static_cast<char*>(sort_) +
        4 * align_up(static_cast<size_t>(std::min(max_segments, total_segments)) * static_cast<size_t>(vocab) * 4));
    size_t temp_bytes = temp_bytes_;
    SERVE8_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        temp_, temp_bytes, p.keys, const_cast<float*>(p.sorted_keys), p.ids, const_cast<int32_t*>(p.sorted_ids), pairs,
        c.num_segments, offsets, offsets + 1, 0, 32, stream_));
    sample_draw_kernel<<<c.num_segments, kThreads, 0, stream_>>>(p, c.segment_begin);
    SERVE8_CUDA_CHECK_LAUNCH("sample_draw_kernel");
  }

  if (host_out_count_ < static_cast<size_t>(b)) {
    if (host_out_) SERVE8_CUDA_CHECK(cudaFreeHost(host_out_));
    host_out_ = nullptr;
    SERVE8_CUDA_CHECK(cudaMallocHost(&host_out_, sizeof(int32_t) * b));
    host_out_count_ = static_cast<size_t>(b);
  }
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(host_out_, p.out, sizeof(int32_t) * b, cudaMemcpyDeviceToHost, stream_));
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::copy(host_out_, host_out_ + b, out_ids);
}

}  // namespace serve8
