// The CPU reference's rope_kv_store on one QKV GEMM row per token: q comes out rotated and
// contiguous, k rotated in its row, and the pool holds what rope then kv_store on q, k and v apart
// write, in every KV dtype (rope_kv_store_check.h); rows of the wrong width are refused.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"
#include "core/error.h"
#include "rope_kv_store_check.h"

namespace serve8 {
namespace {

using test::Rng;

TEST(CpuRopeKvStoreTest, QkvRowsAreRopeThenKvStore) {
  auto be = create_cpu_backend();
  Rng rng(5);
  test::expect_rope_kv_store_is_rope_then_kv_store(
      *be, DType::kF32,
      {DType::kF32, DType::kBF16, DType::kF16, DType::kFP8E5M2, DType::kFP8E4M3, DType::kI8, DType::kI4}, 256, rng);
}

TEST(CpuRopeKvStoreTest, RejectsRowsThatAreNotQkv) {
  auto be = create_cpu_backend();
  auto cache = be->create_kv_cache({1, 2, 8, DType::kBF16, 16}, KvScales::ones(1, 2));
  std::vector<float> rows(2 * 9 * 8), q(2 * 4 * 8), pos(2), freq(4);
  ForwardBatch fb;
  const std::vector<int32_t> slots = {3, 4};
  fb.add_sequence(0, 2, std::vector<int32_t>(2, 0), slots);
  const Tensor positions(pos.data(), DType::kI32, {2}), inv_freq(freq.data(), DType::kF32, {4});
  // 4 q heads and 2 KV heads make rows of 8 heads, not 9.
  EXPECT_THROW(be->rope_kv_store(Tensor(rows.data(), DType::kF32, {2, 9, 8}), Tensor(q.data(), DType::kF32, {2, 4, 8}),
                                 positions, inv_freq, be->upload_batch(fb, *cache), cache->layer(0)),
               Error);
}

}  // namespace
}  // namespace serve8
