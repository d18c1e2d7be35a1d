// SlotAllocator: hands out KV pool slots one token at a time, page-aware (DESIGN.md "KV cache").
//
// A slot is the index of one token's K/V in every layer of the pool. The pool keeps each KV head's
// rows of kSlotPageSize consecutive slots together (backend/kv_layout.h), so attention reads a
// sequence fastest when its tokens fill pages in order. Slots stay the unit of ownership (the
// radix cache shares and frees single tokens); pages only steer where new tokens go: a sequence
// continues in its last slot's page while the next slots are free, else starts a page nobody
// uses, and takes free slots of partly used pages only when no page is wholly free.
//
// Slot 0 is never handed out: padded rows of a captured CUDA graph write their K/V there, so it
// must belong to no request. Slots of a live request are owned by that request or by the radix
// cache, never by both; see kv/radix_cache.h for how the three kv/ classes share them.
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
// Slots per page of the pool (backend/kv_layout.h's kKvPageSize; the engine checks they agree).
constexpr int kSlotPageSize = 16;

class SlotAllocator {
 public:
  // num_slots is the pool's size including the reserved slot 0; 1..num_slots-1 are allocatable.
  explicit SlotAllocator(int64_t num_slots);

  bool can_allocate(int64_t n) const { return n >= 0 && n <= num_slots_free(); }
  // n slots for a sequence whose last slot is `after` (-1: none yet): the slots after it in its
  // page while they are free, then wholly free pages in order, then any free slots. A fresh
  // allocator gives 1, 2, 3, ... Throws serve8::Error if fewer than n are free.
  std::vector<int32_t> allocate(int64_t n, int32_t after = -1);
  // Returns slots to the free list. Throws serve8::Error, naming the slot and changing nothing,
  // if any slot is out of range, reserved, not allocated, or listed twice.
  void free(std::span<const int32_t> slots);
  // Frees every allocated slot (engine reset after the radix cache has been flushed).
  void reset();

  bool is_allocated(int32_t slot) const;
  int64_t num_slots_free() const { return free_count_; }
  int64_t num_slots_used() const { return num_slots_total() - num_slots_free(); }
  // Allocatable slots: the pool's size minus the reserved slot.
  int64_t num_slots_total() const { return num_slots_ - 1; }

 private:
  int capacity(int64_t page) const;  // allocatable slots of a page
  void take(int32_t slot, std::vector<int32_t>& out);
  // Pops a page from a stack whose entries may have gone stale (checked on the way out): a page
  // wholly free, or one with any free slot; -1 when none.
  int64_t pop(std::vector<int32_t>& stack, std::vector<uint8_t>& listed, bool whole);
  void push(std::vector<int32_t>& stack, std::vector<uint8_t>& listed, int64_t page);

  int64_t num_slots_;
  int64_t free_count_ = 0;
  std::vector<uint8_t> allocated_;        // [num_slots] 1 while a slot is out; catches double frees
  std::vector<int32_t> free_in_page_;     // [pages]
  std::vector<int32_t> whole_, partial_;  // stacks of pages (lowest on top when fresh)
  std::vector<uint8_t> in_whole_, in_partial_;
};

}  // namespace serve8
