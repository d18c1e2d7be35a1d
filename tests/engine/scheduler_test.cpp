// The scheduler on the CPU backend with the real stories260K model: batch invariance in every KV
// dtype, prefix reuse, chunked prefill, retraction under overload, aborts, and slot accounting.
#include <gtest/gtest.h>

#include <random>

#include "stories_fixture.h"

namespace serve8 {
namespace {

using testing::generate_all;
using testing::greedy;
using testing::stories_args;

std::vector<std::vector<int32_t>> random_prompts(int n, int min_len, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(min_len, max_len), tok(3, 511);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p{1};
    for (int k = len(rng); k > 1; --k) p.push_back(tok(rng));
    out.push_back(p);
  }
  return out;
}

void expect_all_slots_free(Engine& e) {
  const SchedulerStats s = e.stats();
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
  EXPECT_EQ(s.slots_free + s.slots_cached, s.slots_total) << "slots leaked";
  EXPECT_TRUE(e.flush_cache());
  EXPECT_EQ(e.stats().slots_free, e.stats().slots_total);
}

class BatchInvariance : public ::testing::TestWithParam<std::string> {};

// 64 concurrent greedy requests give exactly the ids each gives alone.
TEST_P(BatchInvariance, SixtyFourConcurrentEqualAlone) {
  const auto prompts = random_prompts(64, 1, 48, 7);
  const SamplingParams p = greedy(24);
  auto together = create_engine(stories_args(GetParam()));
  const auto batched = generate_all(*together, prompts, p);
  EngineArgs alone_args = stories_args(GetParam());
  alone_args.scheduler.disable_radix_cache = true;
  auto alone = create_engine(alone_args);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto single = generate_all(*alone, {prompts[i]}, p)[0];
    ASSERT_EQ(batched[i], single) << "request " << i << " with KV " << GetParam();
  }
  expect_all_slots_free(*together);
  expect_all_slots_free(*alone);
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, BatchInvariance,
                         ::testing::Values("fp32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3", "int8", "int4"));

TEST(Scheduler, PrefixHitSkipsPrefillAndKeepsOutput) {
  auto prompts = random_prompts(1, 40, 40, 11);
  std::vector<int32_t> a = prompts[0], b = prompts[0];
  a.push_back(100);
  b.push_back(200);
  auto engine = create_engine(stories_args("fp8_e5m2"));
  generate_all(*engine, {a}, greedy(8));
  auto stream = engine->submit(b, greedy(8));
  engine->run_until_idle();
  std::vector<int32_t> cached_out;
  int cached = -1;
  while (auto ev = stream->next(std::chrono::milliseconds(0))) {
    cached_out.insert(cached_out.end(), ev->new_ids.begin(), ev->new_ids.end());
    cached = ev->cached_tokens;
  }
  EXPECT_EQ(cached, 40) << "the shared 40-token prefix should come from the radix cache";
  EngineArgs off = stories_args("fp8_e5m2");
  off.scheduler.disable_radix_cache = true;
  auto fresh = create_engine(off);
  EXPECT_EQ(generate_all(*fresh, {b}, greedy(8))[0], cached_out);
  EXPECT_GT(engine->stats().radix_hit_rate, 0.0);
  expect_all_slots_free(*engine);
}

TEST(Scheduler, ChunkedPrefillGivesTheSameIds) {
  const auto prompts = random_prompts(8, 30, 90, 3);
  auto whole = create_engine(stories_args("fp32"));
  EngineArgs chunked_args = stories_args("fp32");
  chunked_args.scheduler.chunked_prefill_size = 7;
  chunked_args.scheduler.max_prefill_tokens = 16;
  auto chunked = create_engine(chunked_args);
  EXPECT_EQ(generate_all(*whole, prompts, greedy(16)), generate_all(*chunked, prompts, greedy(16)));
  expect_all_slots_free(*chunked);
}

// A pool far smaller than the work: requests queue and the newest are retracted, and every one
// still finishes with the ids it gets on an uncrowded engine.
TEST(Scheduler, OverloadQueuesAndRetractsButFinishesEverything) {
  const auto prompts = random_prompts(32, 10, 30, 5);
  EngineArgs small = stories_args("bf16");
  small.max_total_tokens = 160;
  auto crowded = create_engine(small);
  const auto got = generate_all(*crowded, prompts, greedy(40));
  EXPECT_GT(crowded->stats().num_retractions, 0) << "the pool was meant to run out during decode";
  auto roomy = create_engine(stories_args("bf16"));
  const auto want = generate_all(*roomy, prompts, greedy(40));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  expect_all_slots_free(*crowded);
}

// Admission keeps room for what running requests will still decode (SGLang's
// --schedule-conservativeness): on a crowded pool it retracts less than admitting with one token of
// room each (0), and every request gets the same ids either way.
TEST(Scheduler, DecodeReservationRetractsLess) {
  const auto prompts = random_prompts(32, 10, 30, 5);
  auto run = [&](double conservativeness, int64_t& retractions) {
    EngineArgs args = stories_args("bf16");
    args.max_total_tokens = 320;
    args.scheduler.schedule_conservativeness = conservativeness;
    auto e = create_engine(args);
    auto ids = generate_all(*e, prompts, greedy(40));
    retractions = e->stats().num_retractions;
    expect_all_slots_free(*e);
    return ids;
  };
  int64_t eager = 0, reserving = 0;
  const auto want = run(0.0, eager);
  const auto got = run(1.0, reserving);
  EXPECT_GT(eager, 0) << "the pool was meant to run out during decode";
  EXPECT_LT(reserving, eager);
  EXPECT_EQ(got, want);
}

// A request whose reservation alone exceeds the pool still runs when nothing else does (and ends
// by length when the pool runs out); the next waits for it rather than both stalling.
TEST(Scheduler, RequestBeyondItsReservationStillRuns) {
  EngineArgs args = stories_args("bf16");
  args.max_total_tokens = 160;
  auto e = create_engine(args);
  const auto got = generate_all(*e, random_prompts(2, 100, 100, 3), greedy(200));
  ASSERT_EQ(got.size(), 2u);
  for (const auto& ids : got) {
    EXPECT_GE(ids.size(), 1u);
    EXPECT_LE(ids.size(), 61u) << "160 slots hold 100 prompt tokens and at most 60 more";
  }
  expect_all_slots_free(*e);
}

// The step counters behind the server's MBU figures: 64 prompts of 5 tokens, 4 new tokens each ->
// one prefill step (which samples the first), then 3 decode steps of 64 rows reading 6, 7 and 8
// KV tokens per row. The host's share is part of each step's time.
TEST(Scheduler, DecodeCountersCountDecodeOnlySteps) {
  std::vector<std::vector<int32_t>> prompts(64, std::vector<int32_t>{1, 40, 41, 42, 43});
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i][1] = static_cast<int32_t>(40 + i);
  EngineArgs args = stories_args("bf16");
  args.scheduler.disable_radix_cache = true;
  auto e = create_engine(args);
  generate_all(*e, prompts, greedy(4));
  const SchedulerStats s = e->stats();
  EXPECT_EQ(s.decode.steps, 3);
  EXPECT_EQ(s.decode.kv_tokens, 64 * (6 + 7 + 8));
  EXPECT_EQ(s.large_decode.steps, 3) << "64 rows is a large decode batch";
  EXPECT_EQ(s.large_decode.kv_tokens, s.decode.kv_tokens);
  EXPECT_GT(s.decode.host_seconds, 0.0);
  EXPECT_LT(s.decode.host_seconds, s.decode.seconds);
  EXPECT_EQ(s.prefill.steps, 1);
  EXPECT_EQ(s.prefill.prompt_tokens, 64 * 5);
  EXPECT_EQ(s.prefill.decode_rows, 0);
  EXPECT_GT(s.prefill.seconds, 0.0);
}

// Steps with prompt tokens, decode rows riding along: with chunks of 4, a 12-token prompt takes
// three steps; a 3-token prompt admitted beside it prefills in the first and decodes in the next two.
TEST(Scheduler, PrefillCountersCountPromptChunksAndTheirDecodeRows) {
  EngineArgs args = stories_args("bf16");
  args.scheduler.disable_radix_cache = true;
  args.scheduler.chunked_prefill_size = 4;
  auto e = create_engine(args);
  generate_all(*e, {random_prompts(1, 12, 12, 5)[0], random_prompts(1, 3, 3, 6)[0]}, greedy(4));
  const SchedulerStats s = e->stats();
  EXPECT_EQ(s.prefill.steps, 3);
  EXPECT_EQ(s.prefill.prompt_tokens, 15);
  EXPECT_EQ(s.prefill.decode_rows, 2);
  EXPECT_EQ(s.decode.steps, 3) << "step 4 decodes both, steps 5 and 6 the long prompt's last two";
}

TEST(Scheduler, AbortFreesSlots) {
  auto engine = create_engine(stories_args("fp8_e4m3"));
  const auto prompts = random_prompts(4, 20, 20, 9);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(engine->submit(p, greedy(400)));
  engine->abort(streams[1]->rid());
  engine->abort(streams[3]->rid());
  engine->run_until_idle();
  for (int i : {1, 3}) {
    std::optional<OutputEvent> last;
    while (auto ev = streams[static_cast<size_t>(i)]->next(std::chrono::milliseconds(0))) last = ev;
    ASSERT_TRUE(last && last->finished);
    EXPECT_EQ(last->reason, FinishReason::kAbort);
  }
  expect_all_slots_free(*engine);
}

TEST(Scheduler, StopsAtEosStopTokenAndLength) {
  auto engine = create_engine(stories_args("fp32"));
  const auto golden = testing::golden_cases()[0];
  SamplingParams p = greedy(50);
  p.stop_token_ids = {golden.greedy[5]};  // the sixth greedy token (401 in the golden path)
  auto s = engine->submit(golden.prompt, p);
  engine->run_until_idle();
  std::optional<OutputEvent> last;
  std::vector<int32_t> ids;
  while (auto ev = s->next(std::chrono::milliseconds(0))) {
    ids.insert(ids.end(), ev->new_ids.begin(), ev->new_ids.end());
    last = ev;
  }
  ASSERT_TRUE(last && last->finished);
  EXPECT_EQ(last->reason, FinishReason::kStop);
  EXPECT_EQ(ids.back(), golden.greedy[5]);
  EXPECT_LE(ids.size(), 6u);
  const auto out = generate_all(*engine, {golden.prompt}, greedy(3))[0];
  EXPECT_EQ(out.size(), 3u);
}

TEST(Scheduler, RejectsBadRequestsWithAnError) {
  auto engine = create_engine(stories_args("fp32"));
  SamplingParams bad = greedy(4);
  bad.temperature = -1;
  for (auto [ids, params] : std::vector<std::pair<std::vector<int32_t>, SamplingParams>>{
           {{}, greedy(4)}, {{1, 600}, greedy(4)}, {{1, 2}, bad}, {std::vector<int32_t>(600, 5), greedy(4)}}) {
    auto s = engine->submit(ids, params);
    engine->run_until_idle();
    auto ev = s->next(std::chrono::milliseconds(0));
    ASSERT_TRUE(ev && ev->finished);
    EXPECT_FALSE(ev->error.empty());
  }
  expect_all_slots_free(*engine);
}

TEST(Scheduler, SeededSamplingIsReproducibleAndBatchInvariant) {
  const auto prompts = random_prompts(16, 5, 20, 21);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 40;
  p.max_new_tokens = 20;
  p.ignore_eos = true;
  p.seed = 1234;
  auto e1 = create_engine(stories_args("fp32"));
  const auto batched = generate_all(*e1, prompts, p);
  auto e2 = create_engine(stories_args("fp32"));
  EXPECT_EQ(generate_all(*e2, {prompts[3]}, p)[0], batched[3]);
  p.seed = 99;
  EXPECT_NE(generate_all(*e2, {prompts[3]}, p)[0], batched[3]);
}

}  // namespace
}  // namespace serve8
