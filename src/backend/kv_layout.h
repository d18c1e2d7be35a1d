// The order of a KV pool's rows (DESIGN.md, "KV cache"): slots in pages of kKvPageSize, and in a
// page each KV head's rows together, so that one head's rows of consecutive slots are one
// contiguous read (the allocator fills a sequence's pages in order, kv/slot_allocator.h). Row
// kv_row(slot, head) of a layer's K or V holds that slot's head_dim values of that head; int8 and
// int4 row parameters are kept in the same order.
#pragma once

#include <cstdint>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define SERVE8_HOST_DEVICE __host__ __device__
#else
#define SERVE8_HOST_DEVICE
#endif

namespace serve8 {

constexpr int kKvPageSize = 16;

// slot >= 0, 0 <= head < num_kv_heads.
SERVE8_HOST_DEVICE constexpr int64_t kv_row(int64_t slot, int64_t head, int64_t num_kv_heads) {
  return (((slot >> 4) * num_kv_heads + head) << 4) | (slot & (kKvPageSize - 1));
}
static_assert(kKvPageSize == 16, "kv_row's shifts are for pages of 16 slots");

// Bytes of one stored row's own parameters: int8 its fp16 scale, int4 its fp16 scale and minimum.
// fp16 keeps int8's scale to 2^-11 of itself, well inside its 1/254 step, in half fp32's bytes.
SERVE8_HOST_DEVICE constexpr int64_t kv_row_param_bytes(DType t) {
  return t == DType::kI8 ? 2 : t == DType::kI4 ? 4 : 0;
}

// int4 trim t cuts a / 50 of a row's range off its bottom and b / 50 off its top, a = t / 4 and
// b = t % 4: 16 trims of up to 6% an end. Of 30 trims up to a tenth an end, SmolLM2-135M's rows
// chose these in 99.7% of cases, and with these alone its KLD was no higher (docs/accuracy.md).
constexpr int kInt4Trims = 16;
SERVE8_HOST_DEVICE constexpr void int4_trim(int t, int& a, int& b) {
  a = t / 4;
  b = t % 4;
}

// Slots a pool of num_slots stores: whole pages.
constexpr int64_t kv_storage_slots(int64_t num_slots) {
  return (num_slots + kKvPageSize - 1) / kKvPageSize * kKvPageSize;
}

}  // namespace serve8
