#include "kv/req_to_token.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace serve8 {
namespace {

using Slots = std::vector<int32_t>;

Slots to_vec(std::span<const int32_t> s) { return Slots(s.begin(), s.end()); }

TEST(ReqToTokenTable, RowsAllocateUntilExhausted) {
  ReqToTokenTable t(3, 16);
  EXPECT_EQ(t.num_rows_free(), 3);
  int a = t.allocate(), b = t.allocate(), c = t.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_FALSE(t.can_allocate());
  EXPECT_THROW(t.allocate(), Error);
  EXPECT_EQ(t.num_rows_used(), 3);
  t.free(b);
  EXPECT_TRUE(t.can_allocate());
  EXPECT_EQ(t.allocate(), b);
}

// A prefill with a cached prefix, a second chunk, then decode steps: each step sends only what
// the row lacks.
TEST(ReqToTokenTable, TakeNewSendsEachSlotOnce) {
  ReqToTokenTable t(2, 8);
  const int r = t.allocate();
  Slots slots{5, 6, 7, 9, 11};
  EXPECT_EQ(to_vec(t.take_new(r, slots, 3)), (Slots{5, 6, 7}));
  EXPECT_EQ(t.length(r), 3);
  EXPECT_EQ(to_vec(t.take_new(r, slots, 4)), (Slots{9}));
  EXPECT_TRUE(t.take_new(r, slots, 4).empty());  // nothing new
  slots.push_back(12);
  EXPECT_EQ(to_vec(t.take_new(r, slots, 6)), (Slots{11, 12}));
  EXPECT_THROW(t.take_new(r, slots, 5), Error);  // rows never shrink
  EXPECT_THROW(t.take_new(r, slots, 7), Error);  // more than the request has
  EXPECT_EQ(t.length(r), 6);
}

TEST(ReqToTokenTable, ContextLengthIsEnforced) {
  ReqToTokenTable t(1, 4);
  const int r = t.allocate();
  const Slots slots{1, 2, 3, 4, 5};
  EXPECT_THROW(t.take_new(r, slots, 5), Error);
  EXPECT_EQ(t.length(r), 0);  // the failed call changed nothing
  EXPECT_EQ(t.take_new(r, slots, 4).size(), 4u);
}

TEST(ReqToTokenTable, FreedRowComesBackEmpty) {
  ReqToTokenTable t(1, 8);
  int r = t.allocate();
  const Slots slots{3, 4};
  t.take_new(r, slots, 2);
  t.free(r);
  r = t.allocate();
  EXPECT_EQ(t.length(r), 0);
  EXPECT_EQ(to_vec(t.take_new(r, slots, 2)), slots);  // a new request on the row sends everything
}

TEST(ReqToTokenTable, BadRowsAreErrors) {
  ReqToTokenTable t(2, 8);
  const Slots slots{1};
  EXPECT_THROW(t.length(0), Error);  // not allocated
  EXPECT_THROW(t.free(1), Error);
  EXPECT_THROW(t.length(2), Error);  // out of range
  EXPECT_THROW(t.take_new(-1, slots, 1), Error);
  int r = t.allocate();
  t.free(r);
  EXPECT_THROW(t.free(r), Error);  // double free of a row
  EXPECT_THROW(ReqToTokenTable(0, 8), Error);
  EXPECT_THROW(ReqToTokenTable(1, 0), Error);
}

}  // namespace
}  // namespace serve8
