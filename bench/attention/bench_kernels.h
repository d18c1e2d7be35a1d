// Kernels of bench_attention beside the ones it measures: read-only ceilings for its decode rows
// (how fast a kernel that does nothing but read moves the same bytes, streamed or gathered by slot
// the way decode gathers them), and a spin that keeps the GPU busy while the host enqueues.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace serve8 {

// Reads `bytes` (a multiple of 16) from `src` front to back; writes a checksum to *sink.
void launch_stream_read(const void* src, size_t bytes, unsigned* sink, cudaStream_t stream);

// Reads `bytes` like launch_stream_read but with loads that fill the L2 (normal eviction
// priority): run over a buffer twice the L2's size, it leaves the L2 holding only clean lines of it.
void launch_l2_fill_read(const void* src, size_t bytes, unsigned* sink, cudaStream_t stream);

// Reads, for every sequence b (kv_indptr[b]..kv_indptr[b+1]) and KV head h, the row_bytes of K and
// of V at pool row kv_row(kv_indices[t], h) (backend/kv_layout.h): the decode kernels' access
// pattern, one block per (split, sequence, KV head) as they launch.
void launch_gather_read(const int32_t* kv_indptr, const int32_t* kv_indices, const void* k_pool, const void* v_pool,
                        int num_seqs, int num_kv_heads, int row_bytes, int splits, unsigned* sink, cudaStream_t stream);

// Spins one thread for about `us` microseconds (by %globaltimer): enqueued before the start event,
// it lets the host enqueue the timed launches meanwhile, so host launch latency stays out of the
// timing, as it does when the engine replays a CUDA graph.
void launch_spin(double us, cudaStream_t stream);

}  // namespace serve8
