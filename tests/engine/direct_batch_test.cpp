// The hand-built steps of bench-one-batch and dump-logits (engine/direct_batch.h), and the CUDA
// graph bookkeeping that needs no GPU.
#include "engine/direct_batch.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "stories_fixture.h"

namespace serve8 {
namespace {

EngineParts stories_parts() {
  EngineArgs a = testing::stories_args("fp32");
  return create_engine_parts(a);
}

std::vector<std::vector<int32_t>> random_prompts(const std::vector<int>& lens, int vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(1, vocab - 1);
  std::vector<std::vector<int32_t>> out;
  for (int n : lens) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = tok(rng);
    out.push_back(p);
  }
  return out;
}

// Chunking a prefill into small steps changes only how the work is cut: the CPU backend is batch
// invariant, so the last-token logits must be bit-identical to one big step, and equal to the
// logits a decode step computes for the same last token over the same prefix.
TEST(DirectBatch, ChunkedPrefillAndDecodeAgreeExactly) {
  EngineParts one = stories_parts();
  EngineParts chunked = stories_parts();
  const int vocab = one.model->config().vocab_size;
  const auto prompts = random_prompts({5, 23, 64}, vocab);
  const auto first = first_slots(3, 80, *one.kv);
  const auto big = prefill(*one.model, *one.kv, prompts, first, 4096, 64, true);
  const auto small = prefill(*chunked.model, *chunked.kv, prompts, first, 7, 2, true);
  ASSERT_EQ(big.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(big[i], small[i]) << "prompt " << i;

  // Decode the last token instead: prefill all but it, then one decode step per sequence.
  EngineParts dec = stories_parts();
  std::vector<std::vector<int32_t>> heads;
  std::vector<int32_t> last, pos;
  for (const auto& p : prompts) {
    heads.emplace_back(p.begin(), p.end() - 1);
    last.push_back(p.back());
    pos.push_back(static_cast<int32_t>(p.size()) - 1);
  }
  prefill(*dec.model, *dec.kv, heads, first, 4096, 64, false);
  ForwardBatch scratch;
  Tensor logits = decode_step(*dec.model, *dec.kv, scratch, last, pos, first);
  std::vector<float> host(static_cast<size_t>(vocab) * 3);
  dec.backend->copy_to_host(host.data(), logits.data, host.size() * sizeof(float));
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(std::vector<float>(host.begin() + static_cast<long>(i) * vocab,
                                 host.begin() + static_cast<long>(i + 1) * vocab),
              big[i])
        << "prompt " << i;
}

TEST(DirectBatch, PoolTooSmallIsAnError) {
  EngineParts p = stories_parts();
  try {
    first_slots(1000, 1000, *p.kv);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-total-tokens"), std::string::npos) << e.what();
  }
}

TEST(DirectBatch, SequenceLongerThanTheTableIsAnError) {
  EngineParts p = stories_parts();
  const int too_long = p.kv->config().max_context_len + 1;
  try {
    first_slots(2, too_long, *p.kv);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--context-length"), std::string::npos) << e.what();
  }
}

TEST(DecodeGraphs, BucketSizes) {
  EXPECT_EQ(LlamaModel::graph_batch_sizes(1), (std::vector<int>{1}));
  EXPECT_EQ(LlamaModel::graph_batch_sizes(6), (std::vector<int>{1, 2, 4, 6}));
  EXPECT_EQ(LlamaModel::graph_batch_sizes(32), (std::vector<int>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(LlamaModel::graph_batch_sizes(36), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 36}));
}

// The CPU backend has no graphs: asking for them captures none and forward runs op by op.
TEST(DecodeGraphs, CpuBackendHasNone) {
  EngineParts p = stories_parts();
  EXPECT_EQ(p.model->enable_decode_graphs(*p.kv, 8), 0);
  const auto prompts = random_prompts({9}, p.model->config().vocab_size);
  const auto first = first_slots(1, 16, *p.kv);
  EXPECT_EQ(prefill(*p.model, *p.kv, prompts, first, 4096, 64, true).size(), 1u);
}

}  // namespace
}  // namespace serve8
