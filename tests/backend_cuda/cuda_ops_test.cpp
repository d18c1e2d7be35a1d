// The CUDA backend's memory, batch upload and dense ops against the CPU reference on random bf16
// inputs; kv_store bit for bit in every KV dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <tuple>

#include "backend/backend.h"
#include "backend/rope_kv_store_check.h"
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

// upload_batch writes each sequence's new slots into its row of the KV cache's request -> slot
// table and reads kv_indices back from the table: a later step on the same rows sends only its new
// tokens' slots and still sees every slot. The fixed arrays keep their addresses from step to step
// (CUDA graphs replay fixed addresses), and a batch that does not fit is refused.
TEST_F(CudaBackendTest, UploadBatchKeepsSlotsInTheTable) {
  const auto get = [&](const Tensor& t) {
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    gpu_->copy_to_host(v.data(), t.data, v.size() * 4);
    return v;
  };
  const auto iota = [](int32_t first, int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), first);
    return v;
  };
  const auto concat = [](std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> v;
    for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
  };
  KvCacheConfig cfg{1, 2, 64, DType::kBF16, 100};
  cfg.max_requests = 3;
  cfg.max_context_len = 16;
  auto cache = gpu_->create_kv_cache(cfg, KvScales::ones(1, 2));
  // Uploading before reserve_steps is refused.
  ForwardBatch fb;
  fb.add_sequence(2, 3, std::vector<int32_t>{5, 6, 7}, iota(3, 3));  // a prompt of 3 on row 2
  EXPECT_THROW(gpu_->upload_batch(fb, *cache), Error);
  gpu_->reserve_steps(StepLimits{6, 3, 4, 2, 64});

  // Step 1: fresh rows send all their slots (row 0: a cached prefix of 10, then one new token; row
  // 3, the padding row: a decode row of 5).
  fb.add_sequence(0, 11, std::vector<int32_t>{8}, iota(20, 11));
  fb.add_sequence(cfg.padding_row(), 5, std::vector<int32_t>{9}, iota(40, 5));
  const DeviceBatch d = gpu_->upload_batch(fb, *cache);
  EXPECT_EQ(d.num_seqs, 3);
  EXPECT_EQ(d.num_tokens, 5);
  EXPECT_EQ(d.max_q_len, 3);
  EXPECT_EQ(d.max_kv_len, 11);
  EXPECT_EQ(get(d.tokens), (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(get(d.positions), (std::vector<int32_t>{0, 1, 2, 10, 4}));
  EXPECT_EQ(get(d.out_slots), (std::vector<int32_t>{3, 4, 5, 30, 44}));
  EXPECT_EQ(get(d.qo_indptr), (std::vector<int32_t>{0, 3, 4, 5}));
  EXPECT_EQ(get(d.kv_indptr), (std::vector<int32_t>{0, 3, 14, 19}));
  EXPECT_EQ(get(d.kv_indices), concat({iota(3, 3), iota(20, 11), iota(40, 5)}));
  EXPECT_EQ(get(d.last_token_rows), (std::vector<int32_t>{2, 3, 4}));
  // The table holds the rows' slots in position order.
  const Tensor table = cache->req_to_token();
  ASSERT_EQ(table.ndim, 2);
  ASSERT_EQ(table.dim(0), cfg.max_requests + 1);
  ASSERT_EQ(table.dim(1), cfg.max_context_len);
  const std::vector<int32_t> rows = get(table);
  const auto row = [&](int r, int n) {
    const auto first = rows.begin() + static_cast<std::ptrdiff_t>(r) * cfg.max_context_len;
    return std::vector<int32_t>(first, first + n);
  };
  EXPECT_EQ(row(2, 3), iota(3, 3));
  EXPECT_EQ(row(0, 11), iota(20, 11));
  EXPECT_EQ(row(3, 5), iota(40, 5));
  EXPECT_EQ(row(1, 16), std::vector<int32_t>(16, 0));  // untouched

  // Step 2, on the same rows (in another order): only the new tokens' slots; kv_indices still
  // lists every slot of each sequence, from the table.
  ForwardBatch next;
  next.add_sequence(0, 13, std::vector<int32_t>{10, 11}, std::vector<int32_t>{31, 32});  // extend by 2
  next.add_sequence(2, 4, std::vector<int32_t>{12}, std::vector<int32_t>{6});            // decode
  const DeviceBatch d2 = gpu_->upload_batch(next, *cache);
  EXPECT_EQ(get(d2.tokens), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(get(d2.positions), (std::vector<int32_t>{11, 12, 3}));
  EXPECT_EQ(get(d2.out_slots), (std::vector<int32_t>{31, 32, 6}));
  EXPECT_EQ(get(d2.kv_indptr), (std::vector<int32_t>{0, 13, 17}));
  EXPECT_EQ(get(d2.kv_indices), concat({iota(20, 13), iota(3, 4)}));
  EXPECT_EQ(get(d2.last_token_rows), (std::vector<int32_t>{1, 2}));
  // The same fixed arrays (CUDA graphs replay fixed addresses).
  EXPECT_EQ(d2.tokens.data, d.tokens.data);
  EXPECT_EQ(d2.positions.data, d.positions.data);
  EXPECT_EQ(d2.out_slots.data, d.out_slots.data);
  EXPECT_EQ(d2.qo_indptr.data, d.qo_indptr.data);
  EXPECT_EQ(d2.kv_indptr.data, d.kv_indptr.data);
  EXPECT_EQ(d2.kv_indices.data, d.kv_indices.data);
  EXPECT_EQ(d2.last_token_rows.data, d.last_token_rows.data);

  // Step 3: row 2 taken by a new request (a fresh row sends all its slots: a radix-cache hit of 2,
  // then a prompt of 2), whose slots replace the old ones; row 0 fills up to the full row length,
  // sending the slots of 3 positions the table lacks for 1 new token.
  ForwardBatch reuse;
  reuse.add_sequence(2, 4, std::vector<int32_t>{13, 14}, std::vector<int32_t>{50, 51, 52, 53});
  reuse.add_sequence(0, 16, std::vector<int32_t>{15}, std::vector<int32_t>{33, 34, 35});
  const DeviceBatch d3 = gpu_->upload_batch(reuse, *cache);
  EXPECT_EQ(get(d3.out_slots), (std::vector<int32_t>{52, 53, 35}));
  EXPECT_EQ(get(d3.positions), (std::vector<int32_t>{2, 3, 15}));
  EXPECT_EQ(get(d3.kv_indices), concat({iota(50, 4), iota(20, 16)}));

  // Batches that do not fit: arrays that disagree, a row past the padding row, a sequence longer
  // than a row, a slot outside the pool, more tokens or sequences than reserved.
  ForwardBatch bad = fb;
  bad.qo_indptr = {0, 3, 5, 4};
  EXPECT_THROW(gpu_->upload_batch(bad, *cache), Error);
  bad.clear();
  bad.add_sequence(cfg.padding_row() + 1, 1, std::vector<int32_t>{1}, std::vector<int32_t>{1});
  EXPECT_THROW(gpu_->upload_batch(bad, *cache), Error);
  bad.clear();
  bad.add_sequence(1, cfg.max_context_len + 1, std::vector<int32_t>{1}, std::vector<int32_t>{1});
  EXPECT_THROW(gpu_->upload_batch(bad, *cache), Error);
  bad.clear();
  bad.add_sequence(1, 2, std::vector<int32_t>{1}, std::vector<int32_t>{1, static_cast<int32_t>(cfg.num_slots)});
  EXPECT_THROW(gpu_->upload_batch(bad, *cache), Error);
  bad.clear();
  bad.add_sequence(1, 7, std::vector<int32_t>(7, 1), iota(60, 7));  // 7 tokens, 6 reserved
  EXPECT_THROW(gpu_->upload_batch(bad, *cache), Error);
  bad.clear();
  for (int r = 0; r < 4; ++r) bad.add_sequence(r % 3, 1, std::vector<int32_t>{1}, std::vector<int32_t>{1});
  EXPECT_THROW(gpu_->upload_batch(bad, *cache), Error);  // 4 sequences, 3 reserved
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
  // Rows up to 8,192 wide are held in registers; 8,200 and 100 take the one-element-a-time kernel.
  for (int64_t h : {4096, 5120, 8192, 8200, 72, 100}) {
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
      std::vector<int32_t> perm(static_cast<size_t>(slots - 1));
      std::iota(perm.begin(), perm.end(), 1);
      std::shuffle(perm.begin(), perm.end(), rng_.gen());
      ForwardBatch fb;  // one prompt of t tokens on table row 0, its slots scattered
      fb.add_sequence(0, static_cast<int>(t), std::vector<int32_t>(static_cast<size_t>(t), 0),
                      std::span<const int32_t>(perm.data(), static_cast<size_t>(t)));
      gpu_->reserve_steps(StepLimits{static_cast<int>(t), 1, hkv, hkv, static_cast<int>(d)});
      auto dk = to_device(*gpu_, k), dv = to_device(*gpu_, v);
      gpu_->kv_store(dk.view({t, hkv, d}), dv.view({t, hkv, d}), gpu_->upload_batch(fb, *gc), gc->layer(1));
      cpu_->kv_store(k.view({t, hkv, d}), v.view({t, hkv, d}), cpu_->upload_batch(fb, *cc), cc->layer(1));
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

// fp32 rows into FP8 pools (scale 1): the GPU's hardware conversion gives the CPU's bytes on every
// rounding case of every exponent from far below the smallest subnormal to past the largest
// finite value (each leading mantissa pattern with its round and sticky bits), on fp32
// subnormals, infinities and NaNs of either sign, and on 2^20 random bit patterns.
TEST_F(CudaBackendTest, Fp8KvStoreRoundsEveryCaseAsTheCpu) {
  std::vector<uint32_t> bits = {0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x00000001u, 0x007fffffu};
  for (uint32_t e = 60; e <= 160; ++e)  // 2^-67 .. 2^33
    for (uint32_t top = 0; top < 64; ++top)
      for (uint32_t low : {0u, 1u, 0x100u, 0x10000u, 0x1ffffu}) bits.push_back((e << 23) | (top << 17) | low);
  std::mt19937 gen(7);
  for (int i = 0; i < (1 << 20); ++i) bits.push_back(static_cast<uint32_t>(gen()));
  const size_t n0 = bits.size();
  for (size_t i = 0; i < n0; ++i) bits.push_back(bits[i] ^ 0x80000000u);  // both signs
  const int64_t d = 128, t = static_cast<int64_t>((bits.size() + d - 1) / d);
  bits.resize(static_cast<size_t>(t * d), 0u);
  HostArray x(DType::kF32, bits.size());
  std::memcpy(x.bytes.data(), bits.data(), x.bytes.size());
  for (DType dt : {DType::kFP8E5M2, DType::kFP8E4M3}) {
    KvCacheConfig cfg{1, 1, static_cast<int>(d), dt, static_cast<int>(t + 1)};
    cfg.max_context_len = static_cast<int>(t);  // every value in one sequence
    auto gc = gpu_->create_kv_cache(cfg, KvScales::ones(1, 1));
    auto cc = cpu_->create_kv_cache(cfg, KvScales::ones(1, 1));
    std::vector<int32_t> slots(static_cast<size_t>(t));
    std::iota(slots.begin(), slots.end(), 1);
    ForwardBatch fb;
    fb.add_sequence(0, static_cast<int>(t), std::vector<int32_t>(static_cast<size_t>(t), 0), slots);
    gpu_->reserve_steps(StepLimits{static_cast<int>(t), 1, 1, 1, static_cast<int>(d)});
    auto dx = to_device(*gpu_, x);
    gpu_->kv_store(dx.view({t, 1, d}), dx.view({t, 1, d}), gpu_->upload_batch(fb, *gc), gc->layer(0));
    cpu_->kv_store(x.view({t, 1, d}), x.view({t, 1, d}), cpu_->upload_batch(fb, *cc), cc->layer(0));
    const Tensor g = gc->layer(0).k, c = cc->layer(0).k;
    const HostArray got = to_host(*gpu_, g.data, dt, static_cast<size_t>(g.numel()));
    const auto* want = static_cast<const uint8_t*>(c.data);
    int64_t differ = 0;
    for (size_t i = static_cast<size_t>(d); i < static_cast<size_t>((t + 1) * d); ++i) {  // slots 1..t
      if (got.bytes[i] == want[i]) continue;
      if (differ++ < 5) {
        const uint32_t b = bits[i - static_cast<size_t>(d)];
        ADD_FAILURE() << dtype_name(dt) << ": float bits 0x" << std::hex << b << " stored 0x" << int{got.bytes[i]}
                      << ", the CPU 0x" << int{want[i]};
      }
    }
    EXPECT_EQ(differ, 0) << dtype_name(dt) << ", of " << bits.size();
  }
}

// rope_kv_store (one kernel where head_dim is a multiple of 16, the two ops otherwise; int8 and
// int4 through their rotated store) leaves q, k and the pool byte for byte as rope followed by
// kv_store, for every storage dtype.
TEST_F(CudaBackendTest, RopeKvStoreIsRopeThenKvStore) {
  test::expect_rope_kv_store_is_rope_then_kv_store(
      *gpu_, DType::kBF16, {DType::kBF16, DType::kF16, DType::kFP8E5M2, DType::kFP8E4M3, DType::kI8, DType::kI4}, 256,
      rng_);
}

}  // namespace
}  // namespace serve8
