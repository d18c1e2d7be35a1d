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

TEST(ReqToTokenTable, AppendSlotsLengthTruncate) {
  ReqToTokenTable t(2, 8);
  int r = t.allocate();
  EXPECT_EQ(t.length(r), 0);
  t.append(r, Slots{5, 6, 7});
  t.append(r, Slots{9});
  EXPECT_EQ(t.length(r), 4);
  EXPECT_EQ(to_vec(t.slots(r)), (Slots{5, 6, 7, 9}));
  t.truncate(r, 2);
  EXPECT_EQ(to_vec(t.slots(r)), (Slots{5, 6}));
  EXPECT_THROW(t.truncate(r, 3), Error);
  EXPECT_THROW(t.truncate(r, -1), Error);
  t.truncate(r, 0);
  EXPECT_EQ(t.length(r), 0);
}

TEST(ReqToTokenTable, ContextLengthIsEnforced) {
  ReqToTokenTable t(1, 4);
  int r = t.allocate();
  EXPECT_TRUE(t.can_append(r, 4));
  EXPECT_FALSE(t.can_append(r, 5));
  t.append(r, Slots{1, 2, 3});
  EXPECT_THROW(t.append(r, Slots{4, 5}), Error);
  EXPECT_EQ(t.length(r), 3);  // the failed append changed nothing
  t.append(r, Slots{4});
  EXPECT_FALSE(t.can_append(r, 1));
}

TEST(ReqToTokenTable, FreedRowComesBackEmpty) {
  ReqToTokenTable t(1, 8);
  int r = t.allocate();
  t.append(r, Slots{3, 4});
  t.free(r);
  r = t.allocate();
  EXPECT_EQ(t.length(r), 0);
}

TEST(ReqToTokenTable, BadRowsAreErrors) {
  ReqToTokenTable t(2, 8);
  EXPECT_THROW(t.slots(0), Error);  // not allocated
  EXPECT_THROW(t.free(1), Error);
  EXPECT_THROW(t.length(2), Error);  // out of range
  EXPECT_THROW(t.append(-1, Slots{1}), Error);
  int r = t.allocate();
  t.free(r);
  EXPECT_THROW(t.free(r), Error);  // double free of a row
  EXPECT_THROW(ReqToTokenTable(0, 8), Error);
  EXPECT_THROW(ReqToTokenTable(1, 0), Error);
}

}  // namespace
}  // namespace serve8
