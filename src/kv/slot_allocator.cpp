#include "kv/slot_allocator.h"

#include <limits>

#include "core/error.h"

namespace serve8 {

SlotAllocator::SlotAllocator(int64_t num_slots) : num_slots_(num_slots) {
  // Slots travel as int32 (ForwardBatch::out_slots, kv_indices).
  SERVE8_CHECK(num_slots >= 1 && num_slots - 1 <= std::numeric_limits<int32_t>::max(),
               "SlotAllocator: num_slots must be in [1, 2^31], got {}", num_slots);
  reset();
}

void SlotAllocator::reset() {
  allocated_.assign(static_cast<size_t>(num_slots_), 0);
  free_.clear();
  free_.reserve(static_cast<size_t>(num_slots_ - 1));
  // Highest first, so that pops hand out 1, 2, 3, ...
  for (int64_t s = num_slots_ - 1; s >= 1; --s) free_.push_back(static_cast<int32_t>(s));
}

std::vector<int32_t> SlotAllocator::allocate(int64_t n) {
  SERVE8_CHECK(n >= 0, "SlotAllocator: cannot allocate {} slots", n);
  SERVE8_CHECK(can_allocate(n), "SlotAllocator: out of KV slots: need {}, {} free of {}", n, num_slots_free(),
               num_slots_total());
  std::vector<int32_t> out(free_.rbegin(), free_.rbegin() + n);
  free_.resize(free_.size() - static_cast<size_t>(n));
  for (int32_t s : out) allocated_[static_cast<size_t>(s)] = 1;
  return out;
}

void SlotAllocator::free(std::span<const int32_t> slots) {
  // Validate everything before touching the free list, so a bad call leaves the allocator intact.
  size_t cleared = 0;
  auto undo = [&] {
    for (size_t j = 0; j < cleared; ++j) allocated_[static_cast<size_t>(slots[j])] = 1;
  };
  for (; cleared < slots.size(); ++cleared) {
    int32_t s = slots[cleared];
    if (s <= kReservedSlot || s >= num_slots_) {
      undo();
      fail("SlotAllocator: freeing slot {} outside the allocatable range [1, {})", s, num_slots_);
    }
    if (!allocated_[static_cast<size_t>(s)]) {
      undo();
      fail("SlotAllocator: double free of slot {} (not allocated)", s);
    }
    allocated_[static_cast<size_t>(s)] = 0;
  }
  // Reversed, so that allocating the same count again returns them in the same order.
  for (auto it = slots.rbegin(); it != slots.rend(); ++it) free_.push_back(*it);
}

bool SlotAllocator::is_allocated(int32_t slot) const {
  return slot > kReservedSlot && slot < num_slots_ && allocated_[static_cast<size_t>(slot)];
}

}  // namespace serve8
