// charge_kernel_time: how bench-one-batch's kernel trace splits a step among its kernels.
#include <gtest/gtest.h>

#include "backend/backend.h"

namespace serve8 {
namespace {

double ms_of(const std::vector<OpTime>& t, const std::string& name) {
  for (const OpTime& o : t)
    if (o.op == name) return o.ms;
  return -1.0;
}

TEST(ChargeKernelTime, BackToBackKernelsKeepTheirOwnTime) {
  const auto t = charge_kernel_time({{"b", 3'000'000, 5'000'000}, {"a", 1'000'000, 3'000'000}});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].op, "a");  // sorted by start before charging, heaviest first after
  EXPECT_DOUBLE_EQ(t[0].ms, 2.0);
  EXPECT_DOUBLE_EQ(ms_of(t, "b"), 2.0);
}

TEST(ChargeKernelTime, AnOverlapIsChargedOnceToTheLaterEnd) {
  // b starts (a programmatic launch) while a runs and waits for it: b is charged from a's end.
  const auto t = charge_kernel_time({{"a", 0, 10'000}, {"b", 4'000, 15'000}});
  EXPECT_DOUBLE_EQ(ms_of(t, "a"), 0.010);
  EXPECT_DOUBLE_EQ(ms_of(t, "b"), 0.005);
}

TEST(ChargeKernelTime, AKernelInsideAnotherCostsNothingAndIdleTimeIsNobodys) {
  const auto t = charge_kernel_time({{"long", 0, 10'000}, {"inner", 2'000, 6'000}, {"after", 20'000, 21'000}});
  EXPECT_DOUBLE_EQ(ms_of(t, "long"), 0.010);
  EXPECT_DOUBLE_EQ(ms_of(t, "inner"), 0.0);
  EXPECT_DOUBLE_EQ(ms_of(t, "after"), 0.001);  // the 10 us gap before it is not charged
}

TEST(ChargeKernelTime, CallsOfOneNameAreSummed) {
  const auto t = charge_kernel_time({{"k", 0, 1'000}, {"k", 1'000, 3'000}, {"j", 3'000, 3'500}});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].op, "k");
  EXPECT_EQ(t[0].calls, 2);
  EXPECT_DOUBLE_EQ(t[0].ms, 0.003);
  EXPECT_EQ(t[1].calls, 1);
}

}  // namespace
}  // namespace serve8
