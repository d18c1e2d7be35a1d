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

int SlotAllocator::capacity(int64_t page) const {
  const int64_t first = page * kSlotPageSize, end = std::min<int64_t>(first + kSlotPageSize, num_slots_);
  return static_cast<int>(end - first) - (first == 0 ? 1 : 0);
}

void SlotAllocator::reset() {
  const int64_t pages = (num_slots_ + kSlotPageSize - 1) / kSlotPageSize;
  allocated_.assign(static_cast<size_t>(num_slots_), 0);
  free_in_page_.assign(static_cast<size_t>(pages), 0);
  in_whole_.assign(static_cast<size_t>(pages), 0);
  in_partial_.assign(static_cast<size_t>(pages), 0);
  whole_.clear();
  partial_.clear();
  free_count_ = num_slots_ - 1;
  // Highest first, so that pops hand out page 0 (slots 1, 2, ...), then 1, 2, ...
  for (int64_t p = pages - 1; p >= 0; --p) {
    free_in_page_[static_cast<size_t>(p)] = capacity(p);
    if (capacity(p) > 0) push(whole_, in_whole_, p);
  }
}

void SlotAllocator::push(std::vector<int32_t>& stack, std::vector<uint8_t>& listed, int64_t page) {
  if (listed[static_cast<size_t>(page)]) return;
  listed[static_cast<size_t>(page)] = 1;
  stack.push_back(static_cast<int32_t>(page));
}

int64_t SlotAllocator::pop(std::vector<int32_t>& stack, std::vector<uint8_t>& listed, bool whole) {
  while (!stack.empty()) {
    const int64_t p = stack.back();
    stack.pop_back();
    listed[static_cast<size_t>(p)] = 0;
    const int n = free_in_page_[static_cast<size_t>(p)];
    if (whole ? n == capacity(p) : n > 0) return p;
  }
  return -1;
}

void SlotAllocator::take(int32_t slot, std::vector<int32_t>& out) {
  allocated_[static_cast<size_t>(slot)] = 1;
  free_in_page_[static_cast<size_t>(slot / kSlotPageSize)]--;
  free_count_--;
  out.push_back(slot);
}

std::vector<int32_t> SlotAllocator::allocate(int64_t n, int32_t after) {
  SERVE8_CHECK(n >= 0, "SlotAllocator: cannot allocate {} slots", n);
  SERVE8_CHECK(can_allocate(n), "SlotAllocator: out of KV slots: need {}, {} free of {}", n, num_slots_free(),
               num_slots_total());
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  const auto want = [&] { return static_cast<int64_t>(out.size()) < n; };
  // Free slots of `page` in order, as many as wanted; a page left with free slots stays listed.
  const auto fill = [&](int64_t page) {
    const int64_t end = std::min<int64_t>((page + 1) * kSlotPageSize, num_slots_);
    for (int64_t s = page * kSlotPageSize; s < end && want(); ++s)
      if (s != kReservedSlot && !allocated_[static_cast<size_t>(s)]) take(static_cast<int32_t>(s), out);
    if (free_in_page_[static_cast<size_t>(page)] > 0) push(partial_, in_partial_, page);
  };
  if (after > kReservedSlot && after < num_slots_) {
    for (int64_t s = after + 1;
         s < num_slots_ && s % kSlotPageSize != 0 && want() && !allocated_[static_cast<size_t>(s)]; ++s)
      take(static_cast<int32_t>(s), out);
  }
  for (int64_t p; want() && (p = pop(whole_, in_whole_, true)) >= 0;) fill(p);
  for (int64_t p; want() && (p = pop(partial_, in_partial_, false)) >= 0;) fill(p);
  SERVE8_CHECK(!want(), "SlotAllocator: {} slots counted free but not found", n - static_cast<int64_t>(out.size()));
  return out;
}

void SlotAllocator::free(std::span<const int32_t> slots) {
  // Validate everything before touching the counts, so a bad call leaves the allocator intact.
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
  for (int32_t s : slots) {
    const int64_t p = s / kSlotPageSize;
    const int n = ++free_in_page_[static_cast<size_t>(p)];
    free_count_++;
    if (n == capacity(p)) {
      push(whole_, in_whole_, p);
    } else if (n == 1) {
      push(partial_, in_partial_, p);
    }
  }
}

bool SlotAllocator::is_allocated(int32_t slot) const {
  return slot > kReservedSlot && slot < num_slots_ && allocated_[static_cast<size_t>(slot)];
}

}  // namespace serve8
