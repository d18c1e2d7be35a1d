// Token sampling on the GPU, the procedure of backend/cpu/cpu_sampling.cpp (the contract every
// serve8 sampler implements), without sorting the vocabulary. Blocks over slices of each row:
//  1. find the greedy answer (argmax, lowest id on ties, NaN skipped) and max z, z = logit / T;
//  2. for temperature > 0, compute e_i = expf(z_i - max z) (1 at the maximum, 0 for NaN), the
//     total, the candidates (e > 0, e >= min_p) and the first level of their histogram;
//  3. find, level by level (sample_select.h), the position top_k and top_p cut the sorted
//     candidates at, then the position u * kept falls at, u = sampling_uniform(seed, step);
//  4. where that position's e is shared by several tokens, the one its rank names in id order.
// A row's last block to finish a pass reads the row's histogram and moves its selection on, so
// the answer is the same whatever the batch. Step 2 keeps e of the candidates for the later
// passes; rows are sampled in chunks whose e fit 32 MiB.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/sample_select.h"

namespace serve8 {

// Per-row controls as the kernels read them; u is drawn on the host.
struct SampleRowParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float u = 0.0f;
  int top_k = -1;
  int segment = -1;  // index among the sampled rows (their histograms), -1 for greedy rows
};

// State of one row between the kernels.
struct SampleRowState {
  float max_z = 0.0f;  // max logit / T, and its first id
  int max_z_id = -1;
  int decided = 0;
  unsigned long long cand_mass = 0;  // the candidates' e, in sample_select.h's fixed point
  SelectState sel;
};

struct SampleParams {
  const float* logits = nullptr;  // [B, V]
  const SampleRowParams* rows = nullptr;
  SampleRowState* state = nullptr;
  int32_t* out = nullptr;  // [B]
  void* parts = nullptr;   // [B, splits] each block's partial results
  int* done = nullptr;     // [B] blocks finished, zero between kernels
  float* keys = nullptr;   // [segments of the chunk, V] e_i of candidates, 0 otherwise
  // Per sampled row, zero between kernels (min_id all ones): [2][kSelectBins] counts and masses
  // (the first level's, kept until the draw has read it, then the deeper level being built) and
  // [kSelectBins] lowest ids of the last level.
  unsigned* hist_count = nullptr;
  unsigned long long* hist_mass = nullptr;
  unsigned* hist_min_id = nullptr;
  int64_t vocab = 0;
  int64_t split_len = 0;  // logits a block scans: a multiple of 4, the same in every kernel
  int row_begin = 0;      // the chunk's first row and first sampled row
  int segment_begin = 0;
};

class CudaSampler {
 public:
  explicit CudaSampler(cudaStream_t stream);
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
  // True when it allocated (the contents are new).
  bool reserve(void*& ptr, size_t& have, size_t want);

  cudaStream_t stream_;
  int sms_ = 1;
  void* rows_ = nullptr;  // SampleRowParams, then SampleRowState, then out
  size_t rows_bytes_ = 0;
  void* keys_ = nullptr;  // SampleParams::keys
  size_t keys_bytes_ = 0;
  void* hist_ = nullptr;  // SampleParams::hist_count, hist_mass, hist_min_id
  size_t hist_bytes_ = 0;
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
