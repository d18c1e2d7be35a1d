// SlotAllocator: hands out token-granular KV pool slots (page size 1, DESIGN.md "KV cache").
//
// A slot is the index of one token's K/V in every layer of the pool. Slot 0 is never handed out:
// padded rows of a captured CUDA graph write their K/V there, so it must belong to no request.
// Slots of a live request are owned by that request or by the radix cache, never by both; see
// kv/radix_cache.h for how the three kv/ classes share them over one request's life.
//
// Check/act pairs: the scheduler asks can_allocate(n) while planning a batch and allocate(n) once
// the plan is final; allocate throws when the check would have failed, so a scheduler bug is loud
// instead of corrupting the pool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace serve8 {

// The slot that padded CUDA-graph rows write to; never allocated.
constexpr int32_t kReservedSlot = 0;

class SlotAllocator {
 public:
  // num_slots is the pool's size including the reserved slot 0; 1..num_slots-1 are allocatable.
  explicit SlotAllocator(int64_t num_slots);

  bool can_allocate(int64_t n) const { return n >= 0 && n <= num_slots_free(); }
  // n slots, ascending on a fresh allocator. Throws serve8::Error if fewer than n are free.
  std::vector<int32_t> allocate(int64_t n);
  // Returns slots to the free list. Throws serve8::Error, naming the slot and changing nothing,
  // if any slot is out of range, reserved, not allocated, or listed twice.
  void free(std::span<const int32_t> slots);
  // Frees every allocated slot (engine reset after the radix cache has been flushed).
  void reset();

  bool is_allocated(int32_t slot) const;
  int64_t num_slots_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_slots_used() const { return num_slots_total() - num_slots_free(); }
  // Allocatable slots: the pool's size minus the reserved slot.
  int64_t num_slots_total() const { return num_slots_ - 1; }

 private:
  int64_t num_slots_;
  // A stack: O(1) per slot both ways, and deterministic, which the tests rely on.
  std::vector<int32_t> free_;
  std::vector<uint8_t> allocated_;  // [num_slots] 1 while a slot is out; catches double frees
};

}  // namespace serve8
