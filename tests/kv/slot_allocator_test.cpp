#include "kv/slot_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace serve8 {
namespace {

using Slots = std::vector<int32_t>;

TEST(SlotAllocator, FreshAllocatorCountsExcludeReservedSlot) {
  SlotAllocator a(8);
  EXPECT_EQ(a.num_slots_total(), 7);
  EXPECT_EQ(a.num_slots_free(), 7);
  EXPECT_EQ(a.num_slots_used(), 0);
  EXPECT_FALSE(a.is_allocated(kReservedSlot));
  EXPECT_EQ(a.allocate(3), (Slots{1, 2, 3}));
  EXPECT_EQ(a.num_slots_free(), 4);
  EXPECT_EQ(a.num_slots_used(), 3);
  EXPECT_TRUE(a.is_allocated(2));
}

TEST(SlotAllocator, NeverHandsOutSlotZero) {
  SlotAllocator a(16);
  Slots all = a.allocate(15);
  std::sort(all.begin(), all.end());
  Slots expected(15);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);
  // Round trip through the free list: still no slot 0.
  a.free(all);
  Slots again = a.allocate(15);
  EXPECT_EQ(std::count(again.begin(), again.end(), kReservedSlot), 0);
}

TEST(SlotAllocator, Exhaustion) {
  SlotAllocator a(5);
  EXPECT_TRUE(a.can_allocate(4));
  EXPECT_FALSE(a.can_allocate(5));
  EXPECT_THROW(a.allocate(5), Error);
  EXPECT_EQ(a.num_slots_free(), 4);  // a failed allocate changes nothing
  Slots s = a.allocate(4);
  EXPECT_FALSE(a.can_allocate(1));
  EXPECT_TRUE(a.can_allocate(0));
  EXPECT_TRUE(a.allocate(0).empty());
  EXPECT_THROW(a.allocate(1), Error);
  a.free(std::span(s).first(2));
  EXPECT_TRUE(a.can_allocate(2));
  EXPECT_EQ(a.allocate(2).size(), 2u);
}

TEST(SlotAllocator, NegativeCountsAreRejected) {
  SlotAllocator a(5);
  EXPECT_FALSE(a.can_allocate(-1));
  EXPECT_THROW(a.allocate(-1), Error);
}

TEST(SlotAllocator, FreedSlotsAreReused) {
  SlotAllocator a(4);
  Slots s = a.allocate(3);
  a.free(Slots{2, 3});
  EXPECT_EQ(a.allocate(2), (Slots{2, 3}));
}

TEST(SlotAllocator, DoubleFreeNamesTheSlotAndChangesNothing) {
  SlotAllocator a(8);
  Slots s = a.allocate(4);  // 1 2 3 4
  a.free(Slots{3});
  try {
    a.free(Slots{1, 3});
    FAIL() << "double free not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 3"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(a.is_allocated(1));  // the good slot before the bad one was not freed either
  EXPECT_EQ(a.num_slots_used(), 3);
  // A slot listed twice in one call is a double free too.
  EXPECT_THROW(a.free(Slots{2, 2}), Error);
  EXPECT_TRUE(a.is_allocated(2));
  EXPECT_EQ(a.num_slots_used(), 3);
}

TEST(SlotAllocator, OutOfRangeAndReservedFreesAreErrors) {
  SlotAllocator a(8);
  a.allocate(7);
  for (int32_t bad : {0, -1, 8, 1000}) {
    try {
      a.free(Slots{bad});
      FAIL() << "freeing " << bad << " not rejected";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(a.num_slots_used(), 7);
}

TEST(SlotAllocator, ResetFreesEverything) {
  SlotAllocator a(6);
  a.allocate(4);
  a.reset();
  EXPECT_EQ(a.num_slots_free(), 5);
  EXPECT_EQ(a.allocate(2), (Slots{1, 2}));
}

// Pages: a new sequence starts a page nobody uses and continues in it while its next slots are free.
TEST(SlotAllocator, SequencesFillTheirOwnPages) {
  SlotAllocator a(64);
  EXPECT_EQ(a.allocate(3), (Slots{1, 2, 3}));
  EXPECT_EQ(a.allocate(3), (Slots{16, 17, 18}));  // not 4: that is the first sequence's next slot
  EXPECT_EQ(a.allocate(1, 3), (Slots{4}));
  EXPECT_EQ(a.allocate(2, 18), (Slots{19, 20}));
  EXPECT_EQ(a.allocate(12, 4), (Slots{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 32}));  // page 0 full: a new page
}

// Sequences that grow a token at a time, interleaved as decode steps run them, keep whole pages.
TEST(SlotAllocator, InterleavedGrowthKeepsPagesWhole) {
  SlotAllocator a(16 * 64 + 1);
  std::vector<Slots> seqs(6);
  for (int step = 0; step < 150; ++step) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (step > static_cast<int>(100 + 10 * i)) continue;  // they end at different lengths
      Slots& s = seqs[i];
      for (int32_t x : a.allocate(1, s.empty() ? -1 : s.back())) s.push_back(x);
    }
  }
  for (const Slots& s : seqs) {
    for (size_t j = 1; j < s.size(); ++j) {
      if (s[j] % 16 != 0) {
        EXPECT_EQ(s[j], s[j - 1] + 1) << "a sequence left its page mid-way";
      }
    }
  }
}

// With no page wholly free, the free slots of partly used pages serve; freeing refills pages.
TEST(SlotAllocator, PartlyUsedPagesServeWhenNoPageIsFree) {
  SlotAllocator a(48);  // pages 0 (slots 1-15), 1, 2
  const Slots x = a.allocate(2), y = a.allocate(2), z = a.allocate(2);
  EXPECT_EQ(x, (Slots{1, 2}));
  EXPECT_EQ(y, (Slots{16, 17}));
  EXPECT_EQ(z, (Slots{32, 33}));
  Slots rest = a.allocate(41);  // every other free slot, from the three partly used pages
  EXPECT_EQ(a.num_slots_free(), 0);
  std::sort(rest.begin(), rest.end());
  EXPECT_EQ(std::adjacent_find(rest.begin(), rest.end()), rest.end());
  a.free(rest);
  a.free(y);  // page 1 wholly free again: the next new sequence starts there
  EXPECT_EQ(a.allocate(3), (Slots{16, 17, 18}));
}

TEST(SlotAllocator, ConstructorBounds) {
  EXPECT_THROW(SlotAllocator(0), Error);
  EXPECT_THROW(SlotAllocator(-3), Error);
  SlotAllocator only_reserved(1);
  EXPECT_EQ(only_reserved.num_slots_total(), 0);
  EXPECT_FALSE(only_reserved.can_allocate(1));
}

}  // namespace
}  // namespace serve8
