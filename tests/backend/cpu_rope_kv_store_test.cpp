// rope_kv_store on one QKV GEMM row per token: q comes out rotated and contiguous, k rotated in its
// row, and the pool holds what rope then kv_store on q, k and v apart write, in every KV dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"
#include "core/error.h"

namespace serve8 {
namespace {

using test::HostArray;
using test::Rng;

TEST(CpuRopeKvStoreTest, QkvRowsAreRopeThenKvStore) {
  auto be = create_cpu_backend();
  Rng rng(5);
  const int64_t t = 6, hq = 8, hkv = 2, d = 64, slots = 48;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kFP8E5M2, DType::kFP8E4M3, DType::kI8, DType::kI4}) {
    KvScales scales = KvScales::ones(1, static_cast<int>(hkv));
    for (float& s : scales.k) s = rng.uniform(0.25f, 4.0f);
    for (float& s : scales.v) s = rng.uniform(0.25f, 4.0f);
    scales.k_mean = rng.normals(static_cast<size_t>(hkv * d));
    scales.v_mean = rng.normals(static_cast<size_t>(hkv * d));
    const KvCacheConfig cfg{1, static_cast<int>(hkv), static_cast<int>(d), dt, slots};
    auto split = be->create_kv_cache(cfg, scales);
    auto fused = be->create_kv_cache(cfg, scales);
    HostArray q(DType::kF32, rng.normals(static_cast<size_t>(t * hq * d), 3.0f));
    HostArray k(DType::kF32, rng.normals(static_cast<size_t>(t * hkv * d), 3.0f));
    HostArray v(DType::kF32, rng.normals(static_cast<size_t>(t * hkv * d), 3.0f));
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (int32_t& p : pos) p = rng.integer(0, 40000);
    std::vector<float> freq(static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i)
      freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(d));
    std::vector<int32_t> perm(static_cast<size_t>(slots - 1));
    std::iota(perm.begin(), perm.end(), 1);
    std::shuffle(perm.begin(), perm.end(), rng.gen());
    ForwardBatch fb;  // one prompt, its slots scattered
    fb.add_sequence(0, static_cast<int>(t), std::vector<int32_t>(static_cast<size_t>(t), 0),
                    std::span<const int32_t>(perm.data(), static_cast<size_t>(t)));
    const Tensor positions(pos.data(), DType::kI32, {t}), inv_freq(freq.data(), DType::kF32, {d / 2});

    HostArray rows = test::qkv_rows(q, k, v, t);
    be->rope(q.view({t, hq, d}), k.view({t, hkv, d}), positions, inv_freq);
    be->kv_store(k.view({t, hkv, d}), v.view({t, hkv, d}), be->upload_batch(fb, *split), split->layer(0));
    HostArray q2(DType::kF32, static_cast<size_t>(t * hq * d));
    be->rope_kv_store(rows.view({t, hq + 2 * hkv, d}), q2.view({t, hq, d}), positions, inv_freq,
                      be->upload_batch(fb, *fused), fused->layer(0));

    const std::string what(dtype_name(dt));
    EXPECT_EQ(q.bytes, q2.bytes) << what << " q";
    EXPECT_EQ(k.bytes, test::row_slices(rows, t, hq * d, hkv * d).bytes) << what << " k";
    EXPECT_EQ(v.bytes, test::row_slices(rows, t, (hq + hkv) * d, hkv * d).bytes) << what << " v left as it was";
    const KvLayer a = split->layer(0), b = fused->layer(0);
    for (const auto& [x, y, name] :
         {std::tuple{&a.k, &b.k, "K"}, {&a.v, &b.v, "V"}, {&a.row_params, &b.row_params, "row parameters"}}) {
      if (x->empty()) continue;
      ASSERT_EQ(x->nbytes(), y->nbytes());
      EXPECT_EQ(0, std::memcmp(x->data, y->data, x->nbytes())) << what << " " << name;
    }
  }
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
