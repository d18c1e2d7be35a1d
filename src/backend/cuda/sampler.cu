#include <algorithm>
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampler.h"

namespace serve8 {
namespace {

constexpr int kThreads = 512;
// The sampled rows' e kept for the passes after the first: at most this many bytes at once.
constexpr int64_t kKeysBytes = int64_t{32} << 20;
static_assert(kSelectBins == 2 * kThreads, "a row's last block scans two bins a thread");

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

using BlockReduceU = cub::BlockReduce<unsigned long long, kThreads>;
using BlockReduceI = cub::BlockReduce<int, kThreads>;
using BlockScanI = cub::BlockScan<int, kThreads>;

struct CountMass {
  unsigned long long c, m;
};
struct AddCountMass {
  __device__ CountMass operator()(const CountMass& a, const CountMass& b) const { return {a.c + b.c, a.m + b.m}; }
};
using BlockScanCM = cub::BlockScan<CountMass, kThreads>;

__device__ void decide(const SampleParams& p, int row, int token) {
  p.state[row].decided = 1;
  p.out[row] = token;
}

// One block's results over its slice of a row, in SampleParams::parts.
struct Part {
  Best best, zbest;
  unsigned long long total, cand_mass;
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

// e of a logit (the contract's step 2): every pass recomputes it, bit for bit the same.
__device__ __forceinline__ float weight_of(float v, float temperature, float max_z) {
  const float z = v / temperature;
  return z == max_z ? 1.0f : (isnan(z) ? 0.0f : expf(z - max_z));
}
__device__ __forceinline__ bool is_candidate(float e, float min_p) { return e > 0.0f && (min_p <= 0.0f || e >= min_p); }

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

// A block's histogram of one level over its slice.
struct BlockHist {
  unsigned count[kSelectBins];
  unsigned long long mass[kSelectBins];
  unsigned min_id[kSelectBins];
};

__device__ void clear_hist(BlockHist& h) {
  for (int b = static_cast<int>(threadIdx.x); b < kSelectBins; b += kThreads) {
    h.count[b] = 0;
    h.mass[b] = 0;
    h.min_id[b] = UINT_MAX;
  }
  __syncthreads();
}

// A row's histogram in global memory: `which` 0 is the first level's, 1 the deeper level's.
struct RowHist {
  unsigned* count;
  unsigned long long* mass;
  unsigned* min_id;
};

__device__ RowHist row_hist(const SampleParams& p, int segment, int which) {
  const int64_t at = (int64_t{segment} * 2 + which) * kSelectBins;
  return RowHist{p.hist_count + at, p.hist_mass + at, p.hist_min_id + int64_t{segment} * kSelectBins};
}

// Adds the block's bins to the row's; integer sums, so the order of the blocks does not matter.
__device__ void flush_hist(const BlockHist& h, RowHist g, bool with_id) {
  __syncthreads();
  for (int b = static_cast<int>(threadIdx.x); b < kSelectBins; b += kThreads) {
    if (h.count[b] == 0) continue;
    atomicAdd(g.count + b, h.count[b]);
    atomicAdd(g.mass + b, h.mass[b]);
    if (with_id) atomicMin(g.min_id + b, h.min_id[b]);
  }
}

struct FinishScratch {
  BlockScanCM::TempStorage scan;
  SelectState st;
  SelectBin bin;
  int pos;
};

// The row's last block: the first nonempty bin from the top whose cumulative sums meet the goal
// (thread t holds the bins 2t and 2t + 1 places from the top), then the bins are cleared.
__device__ void scan_hist(RowHist g, bool with_id, bool clear, FinishScratch& f) {
  const int t = static_cast<int>(threadIdx.x);
  const int d0 = kSelectBins - 1 - 2 * t, d1 = d0 - 1;
  const unsigned long long c0 = __ldcg(g.count + d0), c1 = __ldcg(g.count + d1);
  const unsigned long long m0 = __ldcg(g.mass + d0), m1 = __ldcg(g.mass + d1);
  CountMass ex;
  BlockScanCM(f.scan).ExclusiveScan(CountMass{c0 + c1, m0 + m1}, ex, CountMass{0, 0}, AddCountMass());
  if (t == 0) f.pos = INT_MAX;
  __syncthreads();
  const SelectState& s = f.st;
  const uint64_t cb = s.count_before + ex.c, mb = s.mass_before + ex.m;
  int pos = INT_MAX;
  if (c0 > 0 && select_goal(s, cb + c0, mb + m0)) {
    pos = 2 * t;
  } else if (c1 > 0 && select_goal(s, cb + c0 + c1, mb + m0 + m1)) {
    pos = 2 * t + 1;
  }
  if (pos != INT_MAX) atomicMin(&f.pos, pos);
  __syncthreads();
  if (f.pos == INT_MAX) {
    if (t == 0) f.bin = SelectBin{};
  } else if (f.pos / 2 == t) {
    const bool first = f.pos == 2 * t;
    SelectBin b;
    b.found = true;
    b.digit = static_cast<uint32_t>(first ? d0 : d1);
    b.count_before = first ? cb : cb + c0;
    b.mass_before = first ? mb : mb + m0;
    b.count = first ? c0 : c1;
    b.min_id = with_id ? __ldcg(g.min_id + b.digit) : 0u;
    f.bin = b;
  }
  __syncthreads();
  if (clear) {
    g.count[d0] = g.count[d1] = 0;
    g.mass[d0] = g.mass[d1] = 0;
    if (with_id) g.min_id[d0] = g.min_id[d1] = UINT_MAX;
  }
}

// The row's last block after a pass: scans the level just built, then the first level's bins
// again when a cut has just ended (its draw starts there), and stores the selection.
__device__ void finish_row(const SampleParams& p, int row, int segment, FinishScratch& f) {
  for (bool first = true;; first = false) {
    const int phase = f.st.phase, level = f.st.level;
    if (phase != kSelectCut && phase != kSelectDraw) break;
    if (!first && level != 0) break;  // the next level needs a pass over the logits
    // The first level's bins stay until the draw has read them.
    const bool last_level = level == kSelectLevels - 1;
    scan_hist(row_hist(p, segment, level == 0 ? 0 : 1), last_level, level != 0 || phase == kSelectDraw, f);
    if (threadIdx.x == 0) select_resolve(f.st, f.bin, p.state[row].cand_mass);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  p.state[row].sel = f.st;
  if (f.st.phase == kSelectDone) decide(p, row, f.st.token >= 0 ? f.st.token : p.state[row].max_z_id);
}

// Step 2, grid (slices, rows), sampled rows: e_i, the total, the candidates and the first level
// of their histogram; the row's last block starts the selection.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) sample_weights_kernel(const SampleParams p) {
  __shared__ BlockHist h;
  __shared__ union {
    BlockReduceU::TempStorage u;
    BlockReduceI::TempStorage i;
  } temp;
  __shared__ FinishScratch f;
  const int row = p.row_begin + static_cast<int>(blockIdx.y);
  const SampleRowParams rp = p.rows[row];
  if (rp.temperature == 0.0f || p.state[row].decided) return;  // the same for every block of the row
  const float max_z = p.state[row].max_z;
  clear_hist(h);
  unsigned long long total = 0, cand_mass = 0;
  int count = 0;
  const int segment = rp.segment - p.segment_begin;
  float* keys = p.keys + int64_t{segment} * p.vocab;
  for_slice<kVec>(p, p.logits + int64_t{row} * p.vocab, [&](float v, int64_t i) {
    const float e = weight_of(v, rp.temperature, max_z);
    const unsigned long long mass = select_mass(e);
    total += mass;
    const bool cand = is_candidate(e, rp.min_p);
    keys[i] = cand ? e : 0.0f;
    if (!cand) return;
    ++count;
    cand_mass += mass;
    const uint32_t d = select_digit(select_key(e), 0);
    atomicAdd(&h.count[d], 1u);
    atomicAdd(&h.mass[d], mass);
  });
  total = BlockReduceU(temp.u).Sum(total);
  __syncthreads();
  cand_mass = BlockReduceU(temp.u).Sum(cand_mass);
  __syncthreads();
  count = BlockReduceI(temp.i).Sum(count);
  flush_hist(h, row_hist(p, segment, 0), false);
  Part* parts = static_cast<Part*>(p.parts) + int64_t{row} * gridDim.x;
  if (threadIdx.x == 0) {
    parts[blockIdx.x].total = total;
    parts[blockIdx.x].cand_mass = cand_mass;
    parts[blockIdx.x].count = count;
  }
  if (!last_of_row(p, row)) return;
  if (threadIdx.x == 0) {
    total = cand_mass = 0;
    count = 0;
    for (int i = 0; i < static_cast<int>(gridDim.x); ++i) {
      total += __ldcg(&parts[i].total);
      cand_mass += __ldcg(&parts[i].cand_mass);
      count += __ldcg(&parts[i].count);
    }
    p.state[row].cand_mass = cand_mass;
    // min_p > 1 dropped even the top token: the first at the maximum.
    f.st = select_none();
    if (count > 0) select_begin(f.st, count, total, cand_mass, rp.top_k, rp.top_p, rp.u);
  }
  __syncthreads();
  finish_row(p, row, segment, f);
}

// Step 3, grid (slices, rows), launched once a level for the cut and once a level for the draw:
// the histogram of the selection's next level over the candidates in its range.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) sample_select_kernel(const SampleParams p) {
  __shared__ BlockHist h;
  __shared__ FinishScratch f;
  const int row = p.row_begin + static_cast<int>(blockIdx.y);
  const SampleRowParams rp = p.rows[row];
  if (rp.temperature == 0.0f || p.state[row].decided) return;
  const int phase = p.state[row].sel.phase;
  if (phase != kSelectCut && phase != kSelectDraw) return;
  const int level = p.state[row].sel.level;
  const uint32_t prefix = p.state[row].sel.prefix;
  const int segment = rp.segment - p.segment_begin;
  const bool last_level = level == kSelectLevels - 1;
  clear_hist(h);
  for_slice<kVec>(p, p.keys + int64_t{segment} * p.vocab, [&](float e, int64_t i) {
    if (!(e > 0.0f)) return;
    const uint32_t key = select_key(e);
    if (!select_in(key, level, prefix)) return;
    const uint32_t d = select_digit(key, level);
    atomicAdd(&h.count[d], 1u);
    atomicAdd(&h.mass[d], select_mass(e));
    if (last_level) atomicMin(&h.min_id[d], static_cast<unsigned>(i));
  });
  flush_hist(h, row_hist(p, segment, 1), last_level);
  if (!last_of_row(p, row)) return;
  if (threadIdx.x == 0) f.st = p.state[row].sel;
  __syncthreads();
  finish_row(p, row, segment, f);
}

// Step 4, grid (slices, rows): the drawn key is shared; the tie_rank-th token with it, in id order.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) sample_ties_kernel(const SampleParams p) {
  __shared__ union {
    BlockReduceI::TempStorage reduce;
    BlockScanI::TempStorage scan;
  } temp;
  __shared__ int s_slice;
  __shared__ long long s_rank;
  const int row = p.row_begin + static_cast<int>(blockIdx.y);
  const SampleRowParams rp = p.rows[row];
  if (rp.temperature == 0.0f || p.state[row].decided || p.state[row].sel.phase != kSelectTies) return;
  const uint32_t key = p.state[row].sel.prefix;
  const float* keys = p.keys + int64_t{rp.segment - p.segment_begin} * p.vocab;
  const auto tied = [&](float e) { return e > 0.0f && select_key(e) == key; };
  int n = 0;
  for_slice<kVec>(p, keys, [&](float e, int64_t) { n += tied(e); });
  n = BlockReduceI(temp.reduce).Sum(n);
  Part* parts = static_cast<Part*>(p.parts) + int64_t{row} * gridDim.x;
  if (threadIdx.x == 0) parts[blockIdx.x].count = n;
  if (!last_of_row(p, row)) return;
  if (threadIdx.x == 0) {
    auto rank = static_cast<long long>(p.state[row].sel.tie_rank);
    s_slice = -1;
    for (int i = 0; i < static_cast<int>(gridDim.x); ++i) {
      const int c = __ldcg(&parts[i].count);
      if (rank <= c) {
        s_slice = i;
        break;
      }
      rank -= c;
    }
    s_rank = rank;
  }
  __syncthreads();
  if (s_slice < 0) {  // unreachable: the histograms counted these ties
    if (threadIdx.x == 0) decide(p, row, p.state[row].max_z_id);
    return;
  }
  const int64_t begin = s_slice * p.split_len, end = min(p.vocab, begin + p.split_len);
  long long need = s_rank;
  for (int64_t base = begin; base < end && need > 0; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const int flag = i < end && tied(keys[i]);
    int before = 0, chunk = 0;
    BlockScanI(temp.scan).ExclusiveSum(flag, before, chunk);
    if (flag && before + 1 == need) decide(p, row, static_cast<int>(i));
    need -= chunk;
    __syncthreads();
  }
}

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

CudaSampler::CudaSampler(cudaStream_t stream) : stream_(stream) {
  int device = 0;
  SERVE8_CUDA_CHECK(cudaGetDevice(&device));
  SERVE8_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
}

CudaSampler::~CudaSampler() {
  if (edits_) cudaFree(edits_);
  if (masks_) cudaFree(masks_);
  if (rows_) cudaFree(rows_);
  if (keys_) cudaFree(keys_);
  if (hist_) cudaFree(hist_);
  if (parts_) cudaFree(parts_);
  if (done_) cudaFree(done_);
  if (host_out_) cudaFreeHost(host_out_);
}

bool CudaSampler::reserve(void*& ptr, size_t& have, size_t want) {
  if (want <= have) return false;
  if (ptr) {
    SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer may still be in use
    SERVE8_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    have = 0;
  }
  SERVE8_CUDA_CHECK(cudaMalloc(&ptr, want));
  have = want;
  return true;
}

void CudaSampler::sample(const float* logits, int64_t num_rows, int64_t vocab, const std::vector<SamplingRow>& rows,
                         int32_t* out_ids) {
  if (num_rows == 0) return;
  const int b = static_cast<int>(num_rows);
  const int max_segments = static_cast<int>(std::max<int64_t>(1, kKeysBytes / (vocab * 4)));

  // Host side: per-row parameters, and chunks of rows holding at most max_segments sampled rows.
  std::vector<SampleRowParams> params(static_cast<size_t>(b));
  struct Chunk {
    int row_begin, num_rows, segment_begin, num_segments;
  };
  std::vector<Chunk> chunks;
  Chunk cur{0, 0, 0, 0};
  int segments = 0;
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
        cur = Chunk{r, 0, segments, 0};
      }
      q.segment = segments++;
      ++cur.num_segments;
    }
    ++cur.num_rows;
  }
  chunks.push_back(cur);

  const size_t params_bytes = align_up(sizeof(SampleRowParams) * b);
  const size_t state_bytes = align_up(sizeof(SampleRowState) * b);
  const size_t out_bytes = align_up(sizeof(int32_t) * b);
  reserve(rows_, rows_bytes_, params_bytes + state_bytes + out_bytes);
  char* base = static_cast<char*>(rows_);
  SampleParams p;
  p.logits = logits;
  p.rows = reinterpret_cast<const SampleRowParams*>(base);
  p.state = reinterpret_cast<SampleRowState*>(base + params_bytes);
  p.out = reinterpret_cast<int32_t*>(base + params_bytes + state_bytes);
  p.vocab = vocab;
  SERVE8_CUDA_CHECK(cudaMemcpyAsync(base, params.data(), sizeof(SampleRowParams) * b, cudaMemcpyHostToDevice, stream_));
  if (segments > 0) {
    const int segs = std::min(max_segments, segments);
    reserve(keys_, keys_bytes_, static_cast<size_t>(segs) * static_cast<size_t>(vocab) * 4);
    p.keys = static_cast<float*>(keys_);
    // Zero between kernels: cleared here when new, and by each pass's last block after reading.
    const size_t bins = static_cast<size_t>(segs) * kSelectBins;
    const size_t count_bytes = align_up(bins * 2 * sizeof(unsigned)), mass_bytes = align_up(bins * 2 * 8);
    if (reserve(hist_, hist_bytes_, count_bytes + mass_bytes + align_up(bins * sizeof(unsigned)))) {
      SERVE8_CUDA_CHECK(cudaMemsetAsync(hist_, 0, count_bytes + mass_bytes, stream_));
      SERVE8_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(hist_) + count_bytes + mass_bytes, 0xff,
                                        hist_bytes_ - count_bytes - mass_bytes, stream_));
    }
    p.hist_count = static_cast<unsigned*>(hist_);
    p.hist_mass = reinterpret_cast<unsigned long long*>(static_cast<char*>(hist_) + count_bytes);
    p.hist_min_id = reinterpret_cast<unsigned*>(static_cast<char*>(hist_) + count_bytes + mass_bytes);
  }

  // Slices of at least 4,096 logits, at most 64 a row, and about four blocks an SM in all: a
  // block's fixed cost (its histogram) is worth a longer slice when many rows share the grid.
  // Every sum is an integer or a total order, so the slicing never changes a token.
  const int64_t max_splits = std::clamp<int64_t>((vocab + 4095) / 4096, 1, 64);
  reserve(parts_, parts_bytes_, sizeof(Part) * static_cast<size_t>(max_splits) * static_cast<size_t>(b));
  p.parts = parts_;
  if (reserve(done_, done_bytes_, sizeof(int) * static_cast<size_t>(b)))
    SERVE8_CUDA_CHECK(cudaMemsetAsync(done_, 0, done_bytes_, stream_));
  p.done = static_cast<int*>(done_);
  const bool vec = vocab % 4 == 0 && aligned16(logits);
  for (const Chunk& c : chunks) {  // each holds at least one row
    p.row_begin = c.row_begin;
    p.segment_begin = c.segment_begin;
    const int64_t want = std::min<int64_t>(max_splits, std::max(1, 4 * sms_ / c.num_rows));
    p.split_len = ((vocab + want - 1) / want + 3) / 4 * 4;
    const dim3 grid(static_cast<unsigned>((vocab + p.split_len - 1) / p.split_len), static_cast<unsigned>(c.num_rows));
    (vec ? sample_max_kernel<true> : sample_max_kernel<false>)<<<grid, kThreads, 0, stream_>>>(p);
    SERVE8_CUDA_CHECK_LAUNCH("sample_max_kernel");
    if (c.num_segments == 0) continue;
    (vec ? sample_weights_kernel<true> : sample_weights_kernel<false>)<<<grid, kThreads, 0, stream_>>>(p);
    SERVE8_CUDA_CHECK_LAUNCH("sample_weights_kernel");
    // The cut's deeper levels, then the draw's (a row without a cut is done two passes early).
    for (int pass = 0; pass < 2 * (kSelectLevels - 1); ++pass) {
      (vec ? sample_select_kernel<true> : sample_select_kernel<false>)<<<grid, kThreads, 0, stream_>>>(p);
      SERVE8_CUDA_CHECK_LAUNCH("sample_select_kernel");
    }
    (vec ? sample_ties_kernel<true> : sample_ties_kernel<false>)<<<grid, kThreads, 0, stream_>>>(p);
    SERVE8_CUDA_CHECK_LAUNCH("sample_ties_kernel");
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
