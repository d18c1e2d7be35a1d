// The CUDA backend's memory, batch upload and dense ops against the CPU reference on random bf16
// inputs; kv_store bit for bit in every KV dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>

#include "backend/backend.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace serve8 {
namespace {

using test::CudaBackendTest;
using test::HostArray;
using test::rel_error;
using test::to_device;
using test::to_host;

TEST_F(CudaBackendTest, MemoryIsZeroedAndRoundTrips) {
  EXPECT_EQ(gpu_->name(), "cuda");
  EXPECT_EQ(gpu_->compute_dtype(), DType::kBF16);
  EXPECT_GT(gpu_->free_memory(), size_t{1} << 30);
  EXPECT_GE(gpu_->total_memory(), gpu_->free_memory());
  std::printf("device: %s\n", gpu_->device_description().c_str());
  Buffer b(*gpu_, 1 << 20);
  std::vector<uint8_t> h(1 << 20, 7);
  gpu_->copy_to_host(h.data(), b.data(), h.size());
  EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](uint8_t x) { return x == 0; }));
  std::iota(h.begin(), h.end(), 0);
  gpu_->copy_to_device(b.data(), h.data(), h.size());
  std::vector<uint8_t> back(h.size());
  gpu_->copy_to_host(back.data(), b.data(), back.size());
  EXPECT_EQ(back, h);
}

TEST_F(CudaBackendTest, UploadBatch) {
  ForwardBatch fb;
  fb.tokens = {5, 6, 7, 8, 9};
  fb.positions = {0, 1, 2, 10, 4};
  fb.out_slots = {3, 4, 5, 9, 12};
  fb.qo_indptr = {0, 3, 4, 5};
  fb.kv_indptr = {0, 3, 14, 19};
  fb.kv_indices.resize(19);
  std::iota(fb.kv_indices.begin(), fb.kv_indices.end(), 100);
  const DeviceBatch d = gpu_->upload_batch(fb);
  EXPECT_EQ(d.num_seqs, 3);
  EXPECT_EQ(d.num_tokens, 5);
  EXPECT_EQ(d.max_q_len, 3);
  EXPECT_EQ(d.max_kv_len, 11);
  const auto get = [&](const Tensor& t) {
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    gpu_->copy_to_host(v.data(), t.data, v.size() * 4);
    return v;
  };
  EXPECT_EQ(get(d.tokens), fb.tokens);
  EXPECT_EQ(get(d.positions), fb.positions);
  EXPECT_EQ(get(d.out_slots), fb.out_slots);
  EXPECT_EQ(get(d.qo_indptr), fb.qo_indptr);
  EXPECT_EQ(get(d.kv_indptr), fb.kv_indptr);
  EXPECT_EQ(get(d.kv_indices), fb.kv_indices);
  EXPECT_EQ(get(d.last_token_rows), (std::vector<int32_t>{2, 3, 4}));
  // A second, smaller batch reuses the same buffers (CUDA graphs replay fixed addresses).
  ForwardBatch small = fb;
  small.tokens.resize(3);
  small.positions.resize(3);
  small.out_slots.resize(3);
  small.qo_indptr = {0, 3};
  small.kv_indptr = {0, 3};
  small.kv_indices.resize(3);
  const DeviceBatch d2 = gpu_->upload_batch(small);
  EXPECT_EQ(d2.tokens.data, d.tokens.data);
  EXPECT_EQ(d2.kv_indices.data, d.kv_indices.data);
  fb.qo_indptr = {0, 3, 5, 4};
  EXPECT_THROW(gpu_->upload_batch(fb), Error);
}

TEST_F(CudaBackendTest, EmbeddingAndGatherAreExactCopies) {
  const int64_t v = 1000, h = 72, t = 37;
  HostArray table(DType::kBF16, rng_.normals(static_cast<size_t>(v * h)));
  std::vector<int32_t> ids(static_cast<size_t>(t));
  for (auto& id : ids) id = rng_.integer(0, static_cast<int32_t>(v - 1));
  auto dt = to_device(*gpu_, table);
  auto di = to_device(*gpu_, ids);
  Buffer out(*gpu_, static_cast<size_t>(t * h * 2));
  gpu_->embedding(dt.view({v, h}), di.view({t}), out.view(DType::kBF16, {t, h}));
  const HostArray got = to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(t * h));
  for (int64_t i = 0; i < t; ++i) {
    ASSERT_EQ(0, std::memcmp(got.bytes.data() + i * h * 2, table.bytes.data() + ids[static_cast<size_t>(i)] * h * 2,
                             static_cast<size_t>(h * 2)));
  }
  // gather_rows of an odd row width (no 16-byte path).
  const int64_t w = 5;
  Buffer g(*gpu_, static_cast<size_t>(t * w * 2));
  gpu_->gather_rows(dt.view({v * h / w, w}), di.view({t}), g.view(DType::kBF16, {t, w}));
  const HostArray gg = to_host(*gpu_, g.data(), DType::kBF16, static_cast<size_t>(t * w));
  for (int64_t i = 0; i < t; ++i) {
    ASSERT_EQ(0, std::memcmp(gg.bytes.data() + i * w * 2, table.bytes.data() + ids[static_cast<size_t>(i)] * w * 2,
                             static_cast<size_t>(w * 2)));
  }
}

TEST_F(CudaBackendTest, RmsNormAndAddRmsNorm) {
  for (int64_t h : {4096, 72, 100}) {
    const int64_t t = 13;
    HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(t * h), 2.0f));
    HostArray res(DType::kBF16, rng_.normals(static_cast<size_t>(t * h), 2.0f));
    HostArray w(DType::kBF16, rng_.normals(static_cast<size_t>(h)));
    auto dx = to_device(*gpu_, x);
    auto dres = to_device(*gpu_, res);
    auto dw = to_device(*gpu_, w);
    Buffer out(*gpu_, static_cast<size_t>(t * h * 2));
    HostArray ref(DType::kF32, static_cast<size_t>(t * h));
    gpu_->rmsnorm(dx.view({t, h}), dw.view({h}), 1e-5f, out.view(DType::kBF16, {t, h}));
    cpu_->rmsnorm(x.view({t, h}), w.view({h}), 1e-5f, ref.view({t, h}));
    HostArray got = to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(t * h));
    EXPECT_LT(rel_error(got.values(), ref.values()), 5e-3) << "rmsnorm H=" << h;

    gpu_->add_rmsnorm(dx.view({t, h}), dres.view({t, h}), dw.view({h}), 1e-5f, out.view(DType::kBF16, {t, h}));
    cpu_->add_rmsnorm(x.view({t, h}), res.view({t, h}), w.view({h}), 1e-5f, ref.view({t, h}));
    // The residual sum is rounded to bf16 the same way on both.
    EXPECT_EQ(to_host(*gpu_, dres).bytes, res.bytes) << "add_rmsnorm residual H=" << h;
    got = to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(t * h));
    EXPECT_LT(rel_error(got.values(), ref.values()), 5e-3) << "add_rmsnorm H=" << h;
  }
}

TEST_F(CudaBackendTest, GemmMatchesCpu) {
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape s : {Shape{1, 4096, 4096}, Shape{7, 384, 256}, Shape{130, 1000, 512}, Shape{3, 5, 24}}) {
    HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(s.m * s.k)));
    HostArray w(DType::kBF16, rng_.normals(static_cast<size_t>(s.n * s.k), 0.05f));
    HostArray bias(DType::kBF16, rng_.normals(static_cast<size_t>(s.n)));
    HostArray bias32(DType::kF32, rng_.normals(static_cast<size_t>(s.n)));
    auto dx = to_device(*gpu_, x), dw = to_device(*gpu_, w), db = to_device(*gpu_, bias),
         db32 = to_device(*gpu_, bias32);
    const size_t mn = static_cast<size_t>(s.m * s.n);
    HostArray ref(DType::kF32, mn);
    Buffer out16(*gpu_, mn * 2), out32(*gpu_, mn * 4);
    // bf16 out with a bf16 bias (the epilogue), fp32 out without and with an fp32 bias.
    const Tensor b16 = db.view({s.n}), b32 = db32.view({s.n});
    gpu_->gemm(dx.view({s.m, s.k}), dw.view({s.n, s.k}), &b16, out16.view(DType::kBF16, {s.m, s.n}));
    cpu_->gemm(x.view({s.m, s.k}), w.view({s.n, s.k}), nullptr, ref.view({s.m, s.n}));
    std::vector<float> with_bias = ref.values();
    for (size_t i = 0; i < mn; ++i) with_bias[i] += bias.get(i % static_cast<size_t>(s.n));
    EXPECT_LT(rel_error(to_host(*gpu_, out16.data(), DType::kBF16, mn).values(), with_bias), 8e-3)
        << s.m << "x" << s.n << "x" << s.k;
    gpu_->gemm(dx.view({s.m, s.k}), dw.view({s.n, s.k}), nullptr, out32.view(DType::kF32, {s.m, s.n}));
    EXPECT_LT(rel_error(to_host(*gpu_, out32.data(), DType::kF32, mn).values(), ref.values()), 1e-4);
    gpu_->gemm(dx.view({s.m, s.k}), dw.view({s.n, s.k}), &b32, out32.view(DType::kF32, {s.m, s.n}));
    std::vector<float> with_bias32 = ref.values();
    for (size_t i = 0; i < mn; ++i) with_bias32[i] += bias32.get(i % static_cast<size_t>(s.n));
    EXPECT_LT(rel_error(to_host(*gpu_, out32.data(), DType::kF32, mn).values(), with_bias32), 1e-4);
  }
  HostArray x(DType::kBF16, 8), w(DType::kBF16, 12);
  auto dx = to_device(*gpu_, x), dw = to_device(*gpu_, w);
  Buffer o(*gpu_, 64);
  EXPECT_THROW(gpu_->gemm(dx.view({2, 4}), dw.view({4, 3}), nullptr, o.view(DType::kBF16, {2, 4})), Error);
}

TEST_F(CudaBackendTest, RopeMatchesCpu) {
  // Heads are split over blocks of 8: 10 heads (a partial block) and 48 (six blocks).
  for (const auto& [d, hq, hkv] :
       {std::tuple<int64_t, int64_t, int64_t>{128, 8, 2}, {64, 8, 2}, {8, 8, 2}, {128, 40, 8}}) {
    const int64_t t = 21;
    HostArray q(DType::kBF16, rng_.normals(static_cast<size_t>(t * hq * d)));
    HostArray k(DType::kBF16, rng_.normals(static_cast<size_t>(t * hkv * d)));
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (auto& p : pos) p = rng_.integer(0, 32768);
    HostArray freq(DType::kF32, static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i)
      freq.set(static_cast<size_t>(i), std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(d)));
    auto dq = to_device(*gpu_, q), dk = to_device(*gpu_, k), dp = to_device(*gpu_, pos), df = to_device(*gpu_, freq);
    gpu_->rope(dq.view({t, hq, d}), dk.view({t, hkv, d}), dp.view({t}), df.view({d / 2}));
    HostArray qr(DType::kF32, q.values()), kr(DType::kF32, k.values());
    cpu_->rope(qr.view({t, hq, d}), kr.view({t, hkv, d}), test::view_of(pos, {t}), freq.view({d / 2}));
    EXPECT_LT(rel_error(to_host(*gpu_, dq).values(), qr.values()), 5e-3) << "D=" << d << " Hq=" << hq;
    EXPECT_LT(rel_error(to_host(*gpu_, dk).values(), kr.values()), 5e-3) << "D=" << d << " Hq=" << hq;
  }
}

TEST_F(CudaBackendTest, SiluMulMatchesCpu) {
  for (int64_t inter : {1408, 13}) {
    const int64_t t = 9;
    HostArray gu(DType::kBF16, rng_.normals(static_cast<size_t>(t * 2 * inter), 3.0f));
    auto dg = to_device(*gpu_, gu);
    Buffer out(*gpu_, static_cast<size_t>(t * inter * 2));
    HostArray ref(DType::kF32, static_cast<size_t>(t * inter));
    gpu_->silu_mul(dg.view({t, 2 * inter}), out.view(DType::kBF16, {t, inter}));
    cpu_->silu_mul(gu.view({t, 2 * inter}), ref.view({t, inter}));
    EXPECT_LT(
        rel_error(to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(t * inter)).values(), ref.values()),
        5e-3);
  }
}

// Stores the same bf16 K/V (extremes included) through both backends: the pools must be equal
// byte for byte, for every storage dtype, head dim and per-head scale.
TEST_F(CudaBackendTest, KvStoreIsBitIdenticalToCpu) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kFP8E5M2, DType::kFP8E4M3}) {
    for (int64_t d : {128, 64, 8, 12}) {
      const int hkv = 3;
      const int64_t slots = 50, t = 11;
      KvScales scales = KvScales::ones(2, hkv);
      if (dt == DType::kFP8E4M3 || dt == DType::kF16) {
        for (auto& s : scales.k) s = rng_.uniform(0.001f, 2.0f);
        for (auto& s : scales.v) s = rng_.uniform(0.001f, 2.0f);
      }
      const KvCacheConfig cfg{2, hkv, static_cast<int>(d), dt, slots};
      auto gc = gpu_->create_kv_cache(cfg, scales);
      auto cc = cpu_->create_kv_cache(cfg, scales);
      std::vector<float> kv = rng_.normals(static_cast<size_t>(t * hkv * d), 30.0f);
      // Saturation, infinities, NaN, subnormals and ties.
      const float extremes[] = {1e30f, -1e30f, INFINITY, -INFINITY, NAN, 1e-30f, -3e-8f, 448.5f, 57344.0f, 0.0f};
      for (size_t i = 0; i < std::size(extremes); ++i) kv[i * 7] = extremes[i];
      HostArray k(DType::kBF16, kv), v(DType::kBF16, rng_.normals(kv.size(), 100.0f));
      ForwardBatch fb;
      std::vector<int32_t> perm(static_cast<size_t>(slots - 1));
      std::iota(perm.begin(), perm.end(), 1);
      std::shuffle(perm.begin(), perm.end(), rng_.gen());
      for (int64_t i = 0; i < t; ++i) {
        fb.tokens.push_back(0);
        fb.positions.push_back(static_cast<int32_t>(i));
        fb.out_slots.push_back(perm[static_cast<size_t>(i)]);
        fb.kv_indices.push_back(perm[static_cast<size_t>(i)]);
      }
      fb.qo_indptr = {0, static_cast<int32_t>(t)};
      fb.kv_indptr = {0, static_cast<int32_t>(t)};
      auto dk = to_device(*gpu_, k), dv = to_device(*gpu_, v);
      gpu_->kv_store(dk.view({t, hkv, d}), dv.view({t, hkv, d}), gpu_->upload_batch(fb), gc->layer(1));
      cpu_->kv_store(k.view({t, hkv, d}), v.view({t, hkv, d}), cpu_->upload_batch(fb), cc->layer(1));
      for (int which = 0; which < 2; ++which) {
        const Tensor g = which ? gc->layer(1).v : gc->layer(1).k;
        const Tensor c = which ? cc->layer(1).v : cc->layer(1).k;
        const HostArray got = to_host(*gpu_, g.data, dt, static_cast<size_t>(g.numel()));
        ASSERT_EQ(0, std::memcmp(got.bytes.data(), c.data, c.nbytes()))
            << dtype_name(dt) << " D=" << d << (which ? " V" : " K");
      }
    }
  }
  EXPECT_THROW(gpu_->create_kv_cache({1, 2, 16, DType::kF32, 4}, KvScales::ones(1, 2)), Error);
}

}  // namespace
}  // namespace serve8
