// Penalties, logit_bias and min_new_tokens through the CPU engine on stories260K: each changes
// greedy output the way its definition says, against the same request without it.
#include <gtest/gtest.h>

#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "stories_fixture.h"

namespace serve8 {
namespace {

using testing::greedy;
using testing::stories_args;

// One request's output ids (generate_all throws on an engine error).
std::vector<int32_t> run(Engine& e, const std::vector<int32_t>& prompt, const SamplingParams& p) {
  return testing::generate_all(e, {prompt}, p)[0];
}

size_t repeats(const std::vector<int32_t>& ids) { return ids.size() - std::set<int32_t>(ids.begin(), ids.end()).size(); }

class Penalties : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> engine_ = create_engine(stories_args("fp32"));
  const std::vector<int32_t> prompt_ = {1, 403, 407, 261};
};

TEST_F(Penalties, PresenceAndFrequencyStopRepeats) {
  const auto plain = run(*engine_, prompt_, greedy(60));
  ASSERT_GT(repeats(plain), 10u) << "the greedy story should repeat itself without a penalty";
  SamplingParams p = greedy(60);
  p.presence_penalty = 2.0f;
  p.frequency_penalty = 2.0f;
  const auto penalized = run(*engine_, prompt_, p);
  EXPECT_LT(repeats(penalized), repeats(plain) / 2);
  // The first token comes before anything was generated: penalties leave it alone.
  EXPECT_EQ(penalized.front(), plain.front());
}

TEST_F(Penalties, RepetitionPenaltyCountsThePrompt) {
  const auto plain = run(*engine_, prompt_, greedy(40));
  SamplingParams p = greedy(40);
  p.repetition_penalty = 2.0f;
  const auto penalized = run(*engine_, prompt_, p);
  EXPECT_NE(penalized, plain);
  EXPECT_LT(repeats(penalized), repeats(plain));
  for (int32_t t : penalized) EXPECT_NE(t, 403) << "a prompt token at 1/2 of its logit should not win";
}

TEST_F(Penalties, LogitBiasForcesAndForbids) {
  SamplingParams p = greedy(8);
  p.logit_bias = {{300, 100.0f}};
  EXPECT_EQ(run(*engine_, prompt_, p), std::vector<int32_t>(8, 300));
  const auto plain = run(*engine_, prompt_, greedy(8));
  p.logit_bias = {{plain.front(), -100.0f}};
  EXPECT_NE(run(*engine_, prompt_, p).front(), plain.front());
}

TEST_F(Penalties, MinNewTokensHoldsStopTokensBack) {
  // Token 300, forced by a bias and made a stop token, ends the request at once...
  SamplingParams p = greedy(20);
  p.logit_bias = {{300, 100.0f}};
  p.stop_token_ids = {300};
  EXPECT_EQ(run(*engine_, prompt_, p).size(), 1u);
  // ...unless min_new_tokens holds it back: then 300 cannot be drawn before the fifth token.
  p.min_new_tokens = 5;
  const auto out = run(*engine_, prompt_, p);
  ASSERT_EQ(out.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_NE(out[static_cast<size_t>(i)], 300);
  EXPECT_EQ(out.back(), 300);
}

TEST(LogitEdits, CpuBackendAppliesTheDefinition) {
  auto be = create_backend("cpu");
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 4.0f, -1.0f, 0.0f};
  const Tensor t(logits.data(), DType::kF32, {2, 3});
  const std::vector<LogitEdit> edits = {{0, 0, 0.5f, 2.0f, 0.0f}, {0, 1, 0.5f, 2.0f, 0.0f}, {1, 2, 1.0f, 1.0f, -3.0f}};
  be->edit_logits(t, edits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.0f, 4.0f, -1.0f, -3.0f}));
  EXPECT_THROW(be->edit_logits(t, std::vector<LogitEdit>{{2, 0, 1.0f, 1.0f, 0.0f}}), Error);
}

}  // namespace
}  // namespace serve8
