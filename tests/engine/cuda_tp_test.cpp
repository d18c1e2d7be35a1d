// Tensor parallelism on CUDA over NCCL. On one GPU, a group of one rank still runs every
// collective through NCCL on the backend's stream (the vocabulary-parallel embedding's and the
// row-parallel projections' all-reduces, the LM head's all-gather), inside the captured decode
// graphs too: its logits must equal the whole model's bit for bit. With two GPUs, --tp-size 2 in
// fp32 must give run.c's greedy ids on stories260K, as the CPU's tp test does.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "dummy_llama.h"
#include "engine/direct_batch.h"
#include "model/tp_group.h"
#include "stories_fixture.h"

namespace serve8 {
namespace {

std::unique_ptr<KvCache> pool(Backend& b, const LlamaModel& m) {
  KvCacheConfig c{m.config().num_layers, m.tp_shard().num_kv_heads, m.config().head_dim, DType::kBF16, 8192};
  c.max_requests = 8;
  c.max_context_len = 1024;
  return b.create_kv_cache(c, KvScales::ones(c.num_layers, c.num_kv_heads));
}

TEST(CudaTensorParallel, NcclGroupOfOneMatchesTheWholeModel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  if (!cuda_has_nccl()) GTEST_SKIP() << "built without NCCL";
  LoadOptions lo;
  lo.model_path = testing::write_dummy_llama_config("tp");
  lo.load_format = "dummy";
  constexpr int kMaxTokens = 2048, kMaxSeqs = 8;
  auto b_whole = create_backend("cuda", DType::kBF16), b_tp = create_backend("cuda", DType::kBF16);
  auto whole = load_llama_model(lo, *b_whole, kMaxTokens, kMaxSeqs);
  std::vector<TpPeer> peers;
  auto tp = load_tp_llama_model(
      lo, *b_tp, 1, 1, [](int) -> std::unique_ptr<Backend> { throw Error("one rank"); },
      [&](const ModelConfig&) { return b_tp->create_communicators(1, 0); }, kMaxTokens, kMaxSeqs, peers);
  ASSERT_NE(tp->communicator(), nullptr);
  auto kv_whole = pool(*b_whole, *whole), kv_tp = pool(*b_tp, *tp);

  const int vocab = whole->config().vocab_size;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(1, vocab - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {300, 17, 640}) {
    prompts.emplace_back(static_cast<size_t>(n));
    for (auto& t : prompts.back()) t = tok(rng);
  }
  const auto first = first_slots(3, 1000, *kv_whole);
  const auto lw = prefill(*whole, *kv_whole, prompts, first, 1024, kMaxSeqs, true);
  const auto lt = prefill(*tp, *kv_tp, prompts, first, 1024, kMaxSeqs, true);
  ASSERT_EQ(lw, lt) << "prefill logits differ";

  ASSERT_GT(whole->enable_decode_graphs(*kv_whole, 4), 0);
  ASSERT_GT(tp->enable_decode_graphs(*kv_tp, 4), 0);
  std::vector<int32_t> len = {300, 17, 640};
  ForwardBatch s1, s2;
  for (int step = 0; step < 6; ++step) {
    const int n = step < 3 ? 3 : 1;  // bucket 4 with a padded row, then bucket 1
    std::vector<int32_t> tokens, positions, firsts;
    for (int i = 0; i < n; ++i) {
      tokens.push_back(tok(rng));
      positions.push_back(len[static_cast<size_t>(i)]++);
      firsts.push_back(first[static_cast<size_t>(i)]);
    }
    std::vector<float> x(static_cast<size_t>(n) * vocab), y(x.size());
    const Tensor a = decode_step(*whole, *kv_whole, s1, tokens, positions, firsts);
    b_whole->copy_to_host(x.data(), a.data, x.size() * sizeof(float));
    const Tensor b = decode_step(*tp, *kv_tp, s2, tokens, positions, firsts);
    b_tp->copy_to_host(y.data(), b.data, y.size() * sizeof(float));
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << "decode step " << step;
  }
}

TEST(CudaTensorParallel, Tp2OverNcclGivesRunCIds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  if (!cuda_has_nccl()) GTEST_SKIP() << "built without NCCL";
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << cuda_device_count() << " visible";
  EngineArgs a = testing::stories_args("fp32");
  a.device = "cuda";
  a.dtype = "float32";
  a.tp_size = 2;
  auto engine = create_engine(a);
  testing::expect_golden_one_by_one(*engine);
  testing::expect_golden_in_one_batch(*engine);
}

TEST(CudaTensorParallel, RefusesMoreRanksThanGpus) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  if (!cuda_has_nccl()) GTEST_SKIP() << "built without NCCL";
  EngineArgs a = testing::stories_args("fp32");
  a.device = "cuda";
  a.dtype = "float32";
  a.tp_size = cuda_device_count() + 1;
  try {
    create_engine(a);
    FAIL() << "--tp-size " << a.tp_size << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("visible"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace serve8
