// The CPU engine against llama2.c's run.c on the real stories260K checkpoint: greedy ids with an
// fp32 KV cache must equal the golden ids over their whole length (cuda_golden_test.cpp: the same
// on the GPU in fp32).
#include <gtest/gtest.h>

#include "stories_fixture.h"

namespace serve8 {
namespace {

using testing::expect_golden_in_one_batch;
using testing::expect_golden_one_by_one;
using testing::stories_args;

TEST(Golden, Stories260KGreedyMatchesRunC) {
  auto engine = create_engine(stories_args("fp32"));
  expect_golden_one_by_one(*engine);
}

// All three cases at once in one batch: continuous batching must not change greedy ids.
TEST(Golden, Stories260KGreedyMatchesRunCInOneBatch) {
  auto engine = create_engine(stories_args("fp32"));
  expect_golden_in_one_batch(*engine);
}

}  // namespace
}  // namespace serve8
