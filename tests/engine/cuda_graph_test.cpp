// CUDA-graph decode against op-by-op decode on the GPU: the same dummy model twice, one with
// graphs, fed the same tokens (teacher forcing), across buckets (3 rows padded to 4, 1, 5 padded
// to 8) and across a recapture (the prompts are long enough that the batch buffers grow after the
// graphs were captured). Head dim 128, GQA 2: the tensor-core decode kernel with split KV; bf16,
// int8 and int4 KV (the latter two with q and the output rotated around attention).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "dummy_llama.h"
#include "engine/direct_batch.h"
#include "engine/engine.h"

namespace serve8 {
namespace {

class CudaGraphs : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaGraphs, DecodeMatchesOpByOp) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  EngineArgs a;
  a.model_path = testing::write_dummy_llama_config("graph");
  a.kv_cache_dtype = GetParam();
  a.load_format = "dummy";
  a.device = "cuda";
  a.max_total_tokens = 16384;
  a.scheduler.max_running_requests = 8;
  a.cuda_graph_max_bs = 8;
  EngineParts with = create_engine_parts(a);  // captures graphs for 1, 2, 4, 8
  a.disable_cuda_graph = true;
  EngineParts without = create_engine_parts(a);
  const int vocab = with.model->config().vocab_size;

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(1, vocab - 1);
  const std::vector<int> lens = {1500, 1700, 2100, 900, 40};  // 6240 kv indices: past the first capacity
  std::vector<std::vector<int32_t>> prompts;
  for (int n : lens) {
    prompts.emplace_back(static_cast<size_t>(n));
    for (auto& t : prompts.back()) t = tok(rng);
  }
  const auto first = first_slots(5, 2200, *with.kv);
  prefill(*with.model, *with.kv, prompts, first, 4096, 8, false);
  prefill(*without.model, *without.kv, prompts, first, 4096, 8, false);

  std::vector<int32_t> len(lens.begin(), lens.end());
  ForwardBatch s1, s2;
  for (int step = 0; step < 12; ++step) {
    const int n = step < 4 ? 3 : step < 8 ? 1 : 5;
    std::vector<int32_t> tokens, positions, firsts;
    for (int i = 0; i < n; ++i) {
      tokens.push_back(tok(rng));
      positions.push_back(len[static_cast<size_t>(i)]++);
      firsts.push_back(first[static_cast<size_t>(i)]);
    }
    std::vector<float> x(static_cast<size_t>(n) * vocab), y(x.size());
    Tensor lx = decode_step(*with.model, *with.kv, s1, tokens, positions, firsts);
    ASSERT_EQ(lx.dim(0), n);
    with.backend->copy_to_host(x.data(), lx.data, x.size() * sizeof(float));
    Tensor ly = decode_step(*without.model, *without.kv, s2, tokens, positions, firsts);
    without.backend->copy_to_host(y.data(), ly.data, y.size() * sizeof(float));
    double max_diff = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(x[i])) << "step " << step << " index " << i;
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(x[i] - y[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(y[i])));
    }
    // Padding changes the decode split count, so fp32 sums differ in order and a bf16 rounding
    // may flip: agreement to bf16 noise, not bits.
    EXPECT_LE(max_diff, 0.02 * max_abs + 1e-3) << "step " << step << " (" << n << " rows)";
    EXPECT_GT(max_abs, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, CudaGraphs, ::testing::Values("auto", "int8", "int4"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace serve8
