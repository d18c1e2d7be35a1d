// The CUDA engine in fp32 (--dtype float32, fp32 KV cache) against llama2.c's run.c on the real
// stories260K checkpoint (head_dim 8, 8 query heads over 4 KV heads: the generic attention
// kernel): greedy ids must equal the golden ids over their whole length, as the CPU engine's do
// (golden_test.cpp). In bf16 they diverge. Runs where a CUDA GPU is visible (label gpu); the data
// comes from ../shared or $SERVE8_SHARED_DIR (`scripts/gpu.sh pack` packs it).
#include <gtest/gtest.h>

#include "stories_fixture.h"

namespace serve8 {
namespace {

using testing::expect_golden_in_one_batch;
using testing::expect_golden_one_by_one;
using testing::stories_args;

std::unique_ptr<Engine> cuda_fp32_engine() {
  EngineArgs a = stories_args("fp32");
  a.device = "cuda";
  a.dtype = "float32";
  auto engine = create_engine(a);
  EXPECT_EQ(engine->backend().name(), "cuda");
  EXPECT_EQ(engine->backend().compute_dtype(), DType::kF32);
  EXPECT_EQ(engine->kv_config().dtype, DType::kF32);
  return engine;
}

TEST(CudaGolden, Stories260KFp32GreedyMatchesRunC) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  auto engine = cuda_fp32_engine();
  expect_golden_one_by_one(*engine);
}

// All three cases in one batch: ragged prefill, then decode rows of different lengths together.
TEST(CudaGolden, Stories260KFp32GreedyMatchesRunCInOneBatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  auto engine = cuda_fp32_engine();
  expect_golden_in_one_batch(*engine);
}

// --kv-cache-dtype auto follows the compute dtype: fp32 here too.
TEST(CudaGolden, AutoKvDtypeIsFp32WithFp32Compute) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
  EngineArgs a = stories_args("auto");
  a.device = "cuda";
  a.dtype = "float32";
  EXPECT_EQ(create_engine(a)->kv_config().dtype, DType::kF32);
}

}  // namespace
}  // namespace serve8
