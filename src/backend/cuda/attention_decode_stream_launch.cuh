// The decode stream kernel's host side: its shared-memory set-up and launch per KV dtype, head dim
// and KV heads per block (attention_decode_stream.cuh is the kernel).
#pragma once

#include <type_traits>

#include "backend/cuda/attention_decode_stream.cuh"

namespace serve8 {

// Sets the kernel's shared-memory attributes once per instantiation (before any graph capture: the
// engine's warm-up runs every kernel) and returns how many of its blocks an SM holds at once.
template <DType kKv, int kD, int kHeads>
int decode_stream_configure() {
  using L = DecodeStream<kKv, kD, kHeads>;
  static const int blocks_per_sm = [] {
    const auto kernel = attention_decode_stream_kernel<kKv, kD, kHeads>;
    SERVE8_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    return resident_blocks(kernel, L::kThreads, L::kSmemBytes);
  }();
  return blocks_per_sm;
}

template <DType kKv, int kD, int kHeads>
void launch_decode_stream_kernel(const AttentionParams& p, cudaStream_t stream) {
  using L = DecodeStream<kKv, kD, kHeads>;
  decode_stream_configure<kKv, kD, kHeads>();
  launch_dependent(attention_decode_stream_kernel<kKv, kD, kHeads>,
                   dim3(ceil_div(p.num_kv_heads, kHeads), p.num_seqs, p.num_splits), dim3(L::kThreads), L::kSmemBytes,
                   stream, p);
}

// Calls f(std::integral_constant<int, kHeads>) for `heads` KV heads per block: 2 exists for FP8
// pools only (decode_pairs_heads).
template <DType kKv, typename F>
auto with_decode_heads(int heads, F&& f) {
  if constexpr (decode_pairs_heads(kKv)) {
    if (heads == 2) return f(std::integral_constant<int, 2>{});
  }
  return f(std::integral_constant<int, 1>{});
}

template <DType kKv>
int decode_stream_blocks_per_sm(int head_dim, int heads) {
  return with_decode_heads<kKv>(heads, [&](auto h) {
    return head_dim == 128 ? decode_stream_configure<kKv, 128, decltype(h)::value>()
                           : decode_stream_configure<kKv, 64, decltype(h)::value>();
  });
}

template <DType kKv>
void launch_decode_stream_typed(const AttentionParams& p, cudaStream_t stream) {
  with_decode_heads<kKv>(p.decode_heads, [&](auto h) {
    if (p.head_dim == 128) {
      launch_decode_stream_kernel<kKv, 128, decltype(h)::value>(p, stream);
    } else {
      launch_decode_stream_kernel<kKv, 64, decltype(h)::value>(p, stream);
    }
  });
  SERVE8_CUDA_CHECK_LAUNCH("attention_decode_stream_kernel");
}

}  // namespace serve8
