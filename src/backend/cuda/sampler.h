// Token sampling on the GPU, the procedure of backend/cpu/cpu_sampling.cpp (the contract every
// serve8 sampler implements):
//  1. blocks over slices of each row find, from the fp32 logits, the greedy answer (argmax,
//     lowest id on ties, NaN skipped) and max z with z = logit / T; for temperature > 0 a second
//     pass computes e_i = expf(z_i - max z) (e = 1 at the maximum, 0 for NaN), their total and
//     the candidates (e > 0, e >= min_p). A row's last block combines the slices in order, so
//     the total is the same whatever the batch;
//  2. cub's segmented radix sort orders each sampled row's candidates by e descending; it is
//     stable over ids in order, so ties keep the lower id first;
//  3. one block per sampled row cuts top_k, then top_p (the first n with cumulative e >=
//     top_p * total), and draws the first token whose cumulative e exceeds u * kept, with
//     u = sampling_uniform(seed, step). Sums are in double, as on the CPU.
// Rows are sorted in chunks so that the scratch stays near 128 MiB whatever the vocabulary.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace serve8 {

// Per-row controls as the kernels read them; u is drawn on the host.
struct SampleRowParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float u = 0.0f;
  int top_k = -1;
  int segment = -1;  // index among the chunk's sampled rows, -1 for greedy rows
};

// State of one row between the kernels.
struct SampleRowState {
  double total = 0.0;  // sum of every e_i
  float max_z = 0.0f;  // max logit / T, and its first id
  int max_z_id = -1;
  int num_candidates = 0;
  int decided = 0;
};

struct SampleParams {
  const float* logits = nullptr;  // [B, V]
  const SampleRowParams* rows = nullptr;
  SampleRowState* state = nullptr;
  const int32_t* segment_rows = nullptr;  // row of each segment
  float* keys = nullptr;                  // [segments, V] e_i of candidates, 0 otherwise
  int32_t* ids = nullptr;                 // [segments, V]
  const float* sorted_keys = nullptr;
  const int32_t* sorted_ids = nullptr;
  int32_t* out = nullptr;  // [B]
  void* parts = nullptr;   // [B, splits] each block's partial results
  int* done = nullptr;     // [B] blocks finished, zero between kernels
  int64_t vocab = 0;
  int64_t split_len = 0;  // logits a block scans: a multiple of 4
  int row_begin = 0;      // first row of the chunk
};

class CudaSampler {
 public:
  explicit CudaSampler(cudaStream_t stream) : stream_(stream) {}
  ~CudaSampler();
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  void sample(const float* logits, int64_t num_rows, int64_t vocab, const std::vector<SamplingRow>& rows,
              int32_t* out_ids);
  // Backend::edit_logits on logits [*, vocab] (checked by the caller).
  void edit(float* logits, int64_t vocab, std::span<const LogitEdit> edits);
  // Backend::mask_logits (checked by the caller).
  void mask(float* logits, int64_t vocab, std::span<const int32_t> rows, std::span<const int32_t> allowed);

 private:
  void reserve(void*& ptr, size_t& have, size_t want);

  cudaStream_t stream_;
  void* rows_ = nullptr;  // SampleRowParams, then SampleRowState, then segment rows, then out
  size_t rows_bytes_ = 0;
  void* sort_ = nullptr;  // keys, ids, sorted keys, sorted ids, offsets
  size_t sort_bytes_ = 0;
  void* temp_ = nullptr;  // cub's temporary storage
  size_t temp_bytes_ = 0;
  void* parts_ = nullptr;  // SampleParams::parts
  size_t parts_bytes_ = 0;
  void* done_ = nullptr;  // SampleParams::done
  size_t done_bytes_ = 0;
  void* edits_ = nullptr;  // LogitEdit
  size_t edits_bytes_ = 0;
  void* masks_ = nullptr;  // rows, then their allowed-token words
  size_t masks_bytes_ = 0;
  int32_t* host_out_ = nullptr;  // pinned
  size_t host_out_count_ = 0;
};

}  // namespace serve8
