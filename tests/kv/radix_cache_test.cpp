#include "kv/radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "kv/slot_allocator.h"

namespace serve8 {
namespace {

using Slots = std::vector<int32_t>;
using Tokens = std::vector<int32_t>;

Slots sorted(Slots s) {
  std::sort(s.begin(), s.end());
  return s;
}

TEST(RadixCache, EmptyTreeMatchesNothing) {
  RadixCache c;
  auto m = c.match_prefix(Tokens{1, 2, 3});
  EXPECT_TRUE(m.slots.empty());
  EXPECT_EQ(m.node, c.root());
  EXPECT_EQ(c.total_size(), 0);
  c.validate();
}

TEST(RadixCache, ExactPartialAndNoMatch) {
  RadixCache c;
  auto ins = c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  EXPECT_TRUE(ins.duplicates.empty());
  EXPECT_EQ(c.prefix_length(ins.node), 4);

  auto exact = c.match_prefix(Tokens{1, 2, 3, 4});
  EXPECT_EQ(exact.slots, (Slots{10, 11, 12, 13}));
  EXPECT_EQ(exact.node, ins.node);

  auto longer = c.match_prefix(Tokens{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(longer.slots, (Slots{10, 11, 12, 13}));

  auto none = c.match_prefix(Tokens{2, 1});
  EXPECT_TRUE(none.slots.empty());
  EXPECT_EQ(none.node, c.root());

  EXPECT_EQ(c.num_nodes(), 1);
  auto partial = c.match_prefix(Tokens{1, 2, 9});
  EXPECT_EQ(partial.slots, (Slots{10, 11}));
  EXPECT_EQ(c.prefix_length(partial.node), 2);
  c.validate();
}

TEST(RadixCache, MatchEndingInsideAnEdgeSplitsIt) {
  RadixCache c;
  auto ins = c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  auto m = c.match_prefix(Tokens{1, 2});
  EXPECT_EQ(c.num_nodes(), 2);
  EXPECT_EQ(c.prefix_length(m.node), 2);
  EXPECT_EQ(c.slots(m.node), (Slots{10, 11}));
  // The original node keeps its identity and now holds the tail.
  EXPECT_TRUE(c.is_valid(ins.node));
  EXPECT_EQ(c.prefix_length(ins.node), 4);
  EXPECT_EQ(c.slots(ins.node), (Slots{10, 11, 12, 13}));
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 3, 4}).node, ins.node);
  EXPECT_EQ(c.total_size(), 4);
  c.validate();
}

TEST(RadixCache, MaxLenLeavesTokensToCompute) {
  RadixCache c;
  Tokens p{1, 2, 3};
  c.insert(p, Slots{10, 11, 12});
  auto m = c.match_prefix(p, static_cast<int64_t>(p.size()) - 1);
  EXPECT_EQ(m.slots, (Slots{10, 11}));
  EXPECT_EQ(c.prefix_length(m.node), 2);
  EXPECT_TRUE(c.match_prefix(p, 0).slots.empty());
  EXPECT_TRUE(c.match_prefix(p, -5).slots.empty());
  EXPECT_EQ(c.match_prefix(p, 100).slots.size(), 3u);
  c.validate();
}

TEST(RadixCache, InsertExtensionAddsAChild) {
  RadixCache c;
  auto a = c.insert(Tokens{1, 2}, Slots{10, 11});
  auto b = c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  EXPECT_TRUE(b.duplicates.empty());
  EXPECT_EQ(c.num_nodes(), 2);
  EXPECT_EQ(c.total_size(), 4);
  EXPECT_EQ(c.prefix_length(b.node), 4);
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 3}).slots, (Slots{10, 11, 12}));
  EXPECT_TRUE(c.is_valid(a.node));
  c.validate();
}

TEST(RadixCache, InsertOfAPrefixOfAnEdgeSplitsIt) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  auto r = c.insert(Tokens{1, 2}, Slots{10, 11});
  EXPECT_TRUE(r.duplicates.empty());
  EXPECT_EQ(c.prefix_length(r.node), 2);
  EXPECT_EQ(c.num_nodes(), 2);
  EXPECT_EQ(c.total_size(), 4);
  c.validate();
}

TEST(RadixCache, DivergingBranches) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  auto r = c.insert(Tokens{1, 2, 4, 5}, Slots{10, 11, 14, 15});
  EXPECT_TRUE(r.duplicates.empty());
  EXPECT_EQ(c.num_nodes(), 3);  // {1 2} with children {3} and {4 5}
  EXPECT_EQ(c.total_size(), 5);
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 3}).slots, (Slots{10, 11, 12}));
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 4, 5}).slots, (Slots{10, 11, 14, 15}));
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 7}).slots, (Slots{10, 11}));
  // A third branch straight off the root.
  c.insert(Tokens{7}, Slots{17});
  EXPECT_EQ(c.match_prefix(Tokens{7, 1}).slots, (Slots{17}));
  c.validate();
}

TEST(RadixCache, DuplicatesAreTheCallersSlotsTheTreeAlreadyHad) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  // Another request computed the same prompt in parallel into its own slots, plus one more token.
  auto r = c.insert(Tokens{1, 2, 3, 4}, Slots{20, 21, 22, 23});
  EXPECT_EQ(r.duplicates, (Slots{20, 21, 22}));
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 3, 4}).slots, (Slots{10, 11, 12, 23}));
  // Mixed: the caller matched {1 2} (tree slots) and computed 3 again into 32.
  r = c.insert(Tokens{1, 2, 3}, Slots{10, 11, 32});
  EXPECT_EQ(r.duplicates, (Slots{32}));
  EXPECT_EQ(c.total_size(), 4);
  c.validate();
}

TEST(RadixCache, InsertRejectsBadArguments) {
  RadixCache c;
  EXPECT_THROW(c.insert(Tokens{1, 2}, Slots{10}), Error);
  EXPECT_THROW(c.insert(Tokens{1}, Slots{kReservedSlot}), Error);
  auto r = c.insert(Tokens{}, Slots{});
  EXPECT_EQ(r.node, c.root());
  EXPECT_EQ(c.total_size(), 0);
}

TEST(RadixCache, ReferencesProtectFromEviction) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  auto m = c.match_prefix(Tokens{1, 2});
  c.inc_ref(m.node);
  EXPECT_EQ(c.ref_count(m.node), 1);
  EXPECT_EQ(c.protected_size(), 2);
  EXPECT_EQ(c.evictable_size(), 2);
  EXPECT_EQ(c.evict(100), (Slots{12, 13}));  // only the unlocked tail goes
  EXPECT_EQ(c.evict(100), Slots{});
  EXPECT_EQ(c.total_size(), 2);
  c.inc_ref(m.node);  // a second request on the same prefix
  c.dec_ref(m.node);
  EXPECT_EQ(c.evict(100), Slots{});
  c.dec_ref(m.node);
  EXPECT_EQ(c.protected_size(), 0);
  EXPECT_EQ(c.evict(100), (Slots{10, 11}));
  c.validate();
}

TEST(RadixCache, LockingADeepNodeLocksThePath) {
  RadixCache c;
  c.insert(Tokens{1, 2}, Slots{10, 11});
  auto deep = c.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  c.insert(Tokens{1, 2, 4}, Slots{10, 11, 14});
  c.inc_ref(deep.node);
  EXPECT_EQ(c.protected_size(), 3);
  EXPECT_EQ(c.evict(100), (Slots{14}));
  c.dec_ref(deep.node);
  c.validate();
}

TEST(RadixCache, HandleSurvivesASplitWithItsReference) {
  RadixCache c;
  auto r = c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  c.inc_ref(r.node);
  auto m = c.match_prefix(Tokens{1, 2});  // splits the locked node
  EXPECT_EQ(c.ref_count(m.node), 1);      // the new head inherits the lock
  EXPECT_EQ(c.ref_count(r.node), 1);
  EXPECT_EQ(c.protected_size(), 4);
  c.dec_ref(r.node);
  EXPECT_EQ(c.ref_count(m.node), 0);
  EXPECT_EQ(c.evictable_size(), 4);
  c.validate();
}

TEST(RadixCache, EvictsLeastRecentlyUsedFirst) {
  RadixCache c;
  c.insert(Tokens{1, 1}, Slots{10, 11});
  c.insert(Tokens{2, 2}, Slots{20, 21});
  c.insert(Tokens{3, 3}, Slots{30, 31});
  c.match_prefix(Tokens{1, 1});  // touch A: B is now the oldest
  EXPECT_EQ(c.evict(2), (Slots{20, 21}));
  EXPECT_EQ(c.evict(2), (Slots{30, 31}));
  EXPECT_EQ(c.evict(2), (Slots{10, 11}));
  EXPECT_EQ(c.total_size(), 0);
  EXPECT_EQ(c.num_nodes(), 0);
}

TEST(RadixCache, EvictTrimsALeafTailToTheExactCount) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  EXPECT_EQ(c.evict(1), (Slots{13}));
  EXPECT_EQ(c.match_prefix(Tokens{1, 2, 3, 4}).slots, (Slots{10, 11, 12}));
  EXPECT_EQ(c.evictable_size(), 3);
  c.validate();
}

TEST(RadixCache, ParentIsEvictedOnlyAfterAllItsChildren) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  c.insert(Tokens{1, 2, 4}, Slots{10, 11, 14});  // {1 2} -> {3}, {4}
  c.match_prefix(Tokens{1, 2});                  // the parent is the most recently used node
  EXPECT_EQ(c.evict(1), (Slots{12}));
  EXPECT_EQ(c.num_nodes(), 2);
  // With one child left the parent still stays, even though it is not locked.
  EXPECT_EQ(c.evict(1), (Slots{14}));
  EXPECT_EQ(c.evict(1), (Slots{11}));
  EXPECT_EQ(c.match_prefix(Tokens{1, 2}).slots, (Slots{10}));
  c.validate();
  // Asked for more than a leaf holds, eviction continues into the parent only once it is a leaf.
  RadixCache d;
  d.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  d.insert(Tokens{1, 2, 4}, Slots{10, 11, 14});
  EXPECT_EQ(d.evict(3), (Slots{12, 14, 11}));
  d.validate();
}

TEST(RadixCache, ResetReturnsEverythingWhenNothingIsReferenced) {
  RadixCache c;
  auto a = c.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  c.insert(Tokens{1, 5}, Slots{10, 15});
  c.inc_ref(a.node);
  EXPECT_THROW(c.reset(), Error);
  c.dec_ref(a.node);
  EXPECT_EQ(sorted(c.reset()), (Slots{10, 11, 12, 15}));
  EXPECT_EQ(c.total_size(), 0);
  EXPECT_EQ(c.num_nodes(), 0);
  EXPECT_TRUE(c.match_prefix(Tokens{1, 2, 3}).slots.empty());
  EXPECT_FALSE(c.is_valid(a.node));
  EXPECT_THROW(c.inc_ref(a.node), Error);
  c.validate();
  // Usable again after the flush.
  c.insert(Tokens{1}, Slots{10});
  EXPECT_EQ(c.match_prefix(Tokens{1}).slots, (Slots{10}));
}

TEST(RadixCache, StaleHandlesAndUnbalancedUnlocksAreErrors) {
  RadixCache c;
  auto r = c.insert(Tokens{1, 2}, Slots{10, 11});
  EXPECT_THROW(c.dec_ref(r.node), Error);  // never locked
  c.evict(2);
  EXPECT_FALSE(c.is_valid(r.node));
  c.insert(Tokens{3}, Slots{13});  // recycles the id with a new generation
  EXPECT_FALSE(c.is_valid(r.node));
  EXPECT_THROW(c.inc_ref(r.node), Error);
  EXPECT_THROW(c.slots(r.node), Error);
  EXPECT_THROW(c.inc_ref(RadixCache::NodeHandle{999, 0}), Error);
  c.inc_ref(c.root());  // the empty prefix: nothing to lock
  c.dec_ref(c.root());
}

TEST(RadixCache, HitStatistics) {
  RadixCache c;
  c.insert(Tokens{1, 2, 3, 4}, Slots{10, 11, 12, 13});
  c.match_prefix(Tokens{1, 2, 3, 4, 5, 6, 7, 8});  // 4 of 8
  c.match_prefix(Tokens{9, 9});                    // 0 of 2
  EXPECT_EQ(c.stats().num_queries, 2);
  EXPECT_EQ(c.stats().tokens_queried, 10);
  EXPECT_EQ(c.stats().tokens_matched, 4);
  EXPECT_DOUBLE_EQ(c.stats().hit_rate(), 0.4);
  c.reset_stats();
  EXPECT_EQ(c.stats().hit_rate(), 0.0);
}

TEST(RadixCache, DisabledCachesNothing) {
  RadixCache c(/*disabled=*/true);
  EXPECT_TRUE(c.disabled());
  auto r = c.insert(Tokens{1, 2, 3}, Slots{10, 11, 12});
  EXPECT_EQ(r.duplicates, (Slots{10, 11, 12}));
  EXPECT_EQ(r.node, c.root());
  auto m = c.match_prefix(Tokens{1, 2, 3});
  EXPECT_TRUE(m.slots.empty());
  EXPECT_EQ(m.node, c.root());
  c.inc_ref(m.node);
  c.dec_ref(m.node);
  EXPECT_TRUE(c.evict(10).empty());
  EXPECT_TRUE(c.reset().empty());
  EXPECT_EQ(c.total_size(), 0);
  EXPECT_EQ(c.stats().tokens_queried, 3);
  EXPECT_EQ(c.stats().tokens_matched, 0);
}

// The protocol of the header comment, for two requests sharing a prompt prefix, with a chunked
// prefill step: every slot ends up either free or in the tree.
TEST(RadixCache, RequestLifecycleConservesSlots) {
  SlotAllocator a(32);
  RadixCache c;
  auto admit = [&](const Tokens& p, RadixCache::NodeHandle& node, Slots& slots) {
    auto m = c.match_prefix(p, static_cast<int64_t>(p.size()) - 1);
    c.inc_ref(m.node);
    node = m.node;
    int64_t need = static_cast<int64_t>(p.size() - m.slots.size());
    slots = m.slots;
    const auto fresh = a.allocate(need);
    slots.insert(slots.end(), fresh.begin(), fresh.end());
    return m.slots.size();
  };
  auto finish = [&](const Tokens& tokens, Slots& slots, RadixCache::NodeHandle node) {
    auto r = c.insert(std::span(tokens).first(slots.size()), slots);
    a.free(r.duplicates);
    c.dec_ref(node);
    slots.clear();
  };

  Tokens p1{1, 2, 3, 4, 5, 6};
  RadixCache::NodeHandle n1;
  Slots s1, s2;
  EXPECT_EQ(admit(p1, n1, s1), 0u);
  // Chunk boundary after 4 tokens: share them early.
  {
    auto r = c.insert(std::span(p1).first(4), std::span(s1).first(4));
    a.free(r.duplicates);
    Slots tree = c.slots(r.node);
    Slots rest(s1.begin() + 4, s1.end());
    s1 = tree;
    s1.insert(s1.end(), rest.begin(), rest.end());
    c.inc_ref(r.node);
    c.dec_ref(n1);
    n1 = r.node;
  }
  // Request 2 shares 1 2 3 4 and gets them while request 1 still runs.
  Tokens p2{1, 2, 3, 4, 9};
  RadixCache::NodeHandle n2;
  EXPECT_EQ(admit(p2, n2, s2), 4u);
  EXPECT_EQ(c.protected_size(), 4);
  // Request 1 decodes one token, then both finish.
  Tokens out1 = p1;
  out1.push_back(7);
  const auto one = a.allocate(1);
  s1.insert(s1.end(), one.begin(), one.end());
  finish(out1, s1, n1);
  finish(p2, s2, n2);

  EXPECT_EQ(c.protected_size(), 0);
  EXPECT_EQ(a.num_slots_used(), c.total_size());  // nothing leaked
  EXPECT_EQ(c.total_size(), 8);                   // 1..7 and the 9 branch
  a.free(c.reset());
  EXPECT_EQ(a.num_slots_used(), 0);
  c.validate();
}

}  // namespace
}  // namespace serve8
