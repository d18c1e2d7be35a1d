// The CPU engine against llama2.c's run.c on the real stories260K checkpoint: greedy ids with an
// fp32 KV cache must equal the golden ids over their whole length.
#include <gtest/gtest.h>

#include "stories_fixture.h"

namespace serve8 {
namespace {

using testing::generate_all;
using testing::golden_cases;
using testing::stories_args;

TEST(Golden, Stories260KGreedyMatchesRunC) {
  auto engine = create_engine(stories_args("fp32"));
  const auto cases = golden_cases();
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;  // run.c stops only at BOS (id 1); the golden list ends there
    p.max_new_tokens = static_cast<int>(c.greedy.size());
    const auto out = generate_all(*engine, {c.prompt}, p)[0];
    ASSERT_EQ(out.size(), c.greedy.size());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], c.greedy[i]) << "position " << i;
  }
}

// All three cases at once in one batch: continuous batching must not change greedy ids.
TEST(Golden, Stories260KGreedyMatchesRunCInOneBatch) {
  auto engine = create_engine(stories_args("fp32"));
  const auto cases = golden_cases();
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const auto& c : cases) {
    prompts.push_back(c.prompt);
    longest = std::max(longest, c.greedy.size());
  }
  p.max_new_tokens = static_cast<int>(longest);
  const auto outs = generate_all(*engine, prompts, p);
  for (size_t k = 0; k < cases.size(); ++k) {
    for (size_t i = 0; i < cases[k].greedy.size(); ++i) ASSERT_EQ(outs[k][i], cases[k].greedy[i]) << "case " << k;
  }
}

}  // namespace
}  // namespace serve8
