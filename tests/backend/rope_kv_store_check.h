// rope_kv_store against rope then kv_store, on any backend: the CPU reference and the CUDA kernels
// take the same check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"

namespace serve8::test {

// rope_kv_store on one QKV row per token against rope then kv_store on q, k and v apart, on `be`
// (activations `act`): q, k and each pool in `pools` equal byte for byte and v's part of the rows
// untouched, over head dims up to max_head_dim (int8/int4 pools: 64 and 128, centred on random
// means) that take the CUDA backend's fused kernel and one that does not.
inline void expect_rope_kv_store_is_rope_then_kv_store(Backend& be, DType act, std::initializer_list<DType> pools,
                                                       int64_t max_head_dim, Rng& rng) {
  for (DType dt : pools) {
    for (const auto& [d, hq, hkv] :
         {std::tuple<int64_t, int64_t, int64_t>{128, 32, 8}, {64, 8, 2}, {256, 8, 1}, {16, 4, 2}, {8, 4, 2}}) {
      if (d > max_head_dim || (kv_dtype_is_rotated(dt) && d != 64 && d != 128)) continue;
      const int64_t slots = 64, t = 13;
      KvScales scales = KvScales::ones(1, static_cast<int>(hkv));
      for (auto& s : scales.k) s = rng.uniform(0.01f, 2.0f);
      for (auto& s : scales.v) s = rng.uniform(0.01f, 2.0f);
      if (kv_dtype_is_rotated(dt)) {
        scales.k_mean = rng.normals(static_cast<size_t>(hkv * d));
        scales.v_mean = rng.normals(static_cast<size_t>(hkv * d));
      }
      const KvCacheConfig cfg{1, static_cast<int>(hkv), static_cast<int>(d), dt, slots};
      auto split_cache = be.create_kv_cache(cfg, scales);
      auto fused_cache = be.create_kv_cache(cfg, scales);
      HostArray q(act, rng.normals(static_cast<size_t>(t * hq * d), 4.0f));
      HostArray k(act, rng.normals(static_cast<size_t>(t * hkv * d), 4.0f));
      HostArray v(act, rng.normals(static_cast<size_t>(t * hkv * d), 4.0f));
      std::vector<int32_t> pos(static_cast<size_t>(t));
      for (auto& p : pos) p = rng.integer(0, 100000);
      HostArray freq(DType::kF32, static_cast<size_t>(d / 2));
      for (int64_t i = 0; i < d / 2; ++i)
        freq.set(static_cast<size_t>(i), std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(d)));
      std::vector<int32_t> perm(static_cast<size_t>(slots - 1));
      std::iota(perm.begin(), perm.end(), 1);
      std::shuffle(perm.begin(), perm.end(), rng.gen());
      ForwardBatch fb;  // one prompt on table row 0, its slots scattered
      fb.add_sequence(0, static_cast<int>(t), std::vector<int32_t>(static_cast<size_t>(t), 0),
                      std::span<const int32_t>(perm.data(), static_cast<size_t>(t)));
      be.reserve_steps(
          StepLimits{static_cast<int>(t), 1, static_cast<int>(hq), static_cast<int>(hkv), static_cast<int>(d)});
      auto dp = to_device(be, pos), df = to_device(be, freq), dv = to_device(be, v);
      auto q1 = to_device(be, q), k1 = to_device(be, k);
      be.rope(q1.view({t, hq, d}), k1.view({t, hkv, d}), dp.view({t}), df.view({d / 2}));
      be.kv_store(k1.view({t, hkv, d}), dv.view({t, hkv, d}), be.upload_batch(fb, *split_cache), split_cache->layer(0));
      auto qkv = to_device(be, qkv_rows(q, k, v, t)), q2 = to_device(be, HostArray(act, q.size()));
      be.rope_kv_store(qkv.view({t, hq + 2 * hkv, d}), q2.view({t, hq, d}), dp.view({t}), df.view({d / 2}),
                       be.upload_batch(fb, *fused_cache), fused_cache->layer(0));
      const std::string what = std::string(dtype_name(dt)) + " D=" + std::to_string(d);
      const HostArray rows = to_host(be, qkv);
      EXPECT_EQ(to_host(be, q1).bytes, to_host(be, q2).bytes) << what << " q";
      EXPECT_EQ(to_host(be, k1).bytes, row_slices(rows, t, hq * d, hkv * d).bytes) << what << " k";
      EXPECT_EQ(v.bytes, row_slices(rows, t, (hq + hkv) * d, hkv * d).bytes) << what << " v left as it was";
      const KvLayer split = split_cache->layer(0), fused = fused_cache->layer(0);
      for (const auto& [a, b, name] : {std::tuple{&split.k, &fused.k, "K"},
                                       {&split.v, &fused.v, "V"},
                                       {&split.row_params, &fused.row_params, "int8/int4 row parameters"}}) {
        if (a->empty()) continue;
        EXPECT_EQ(to_host(be, a->data, a->dtype, static_cast<size_t>(a->numel())).bytes,
                  to_host(be, b->data, b->dtype, static_cast<size_t>(b->numel())).bytes)
            << what << " " << name;
      }
    }
  }
}

}  // namespace serve8::test
