// The CUDA backend with fp32 compute (--dtype float32) against the CPU reference, fp32 on both
// sides: every dense op within a few fp32 ulps (bf16 rounding anywhere would be ~1e-3), the GEMM
// in true fp32 (not TF32), kv_store bit for bit into every storage dtype, and the generic attention
// kernel with fp32 q/out over ragged batches; plus the combinations that must be refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <tuple>

#include "attention_scenario.h"
#include "backend/backend.h"
#include "backend/rope_kv_store_check.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace serve8 {
namespace {

using test::HostArray;
using test::make_scenario;
using test::rel_error;
using test::Rng;
using test::Scenario;
using test::SeqShape;
using test::to_device;
using test::to_host;

class CudaFp32Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
    gpu_ = create_backend("cuda", DType::kF32);
    cpu_ = create_backend("cpu");
  }
  std::vector<float> get(const void* data, size_t n) { return to_host(*gpu_, data, DType::kF32, n).values(); }
  std::unique_ptr<Backend> gpu_, cpu_;
  Rng rng_{4321};
};

// Fp32 vs fp32: what is left is summation order and last-ulp differences of expf/sincosf/rsqrtf.
constexpr double kElementwiseTol = 1e-5;
// TF32 inputs (10-bit mantissas) would give ~5e-4 on these random matrices.
constexpr double kGemmTol = 2e-5;
constexpr double kAttentionTol = 2e-5;

TEST_F(CudaFp32Test, ComputeDtypeAndOtherDtypesRefused) {
  EXPECT_EQ(gpu_->compute_dtype(), DType::kF32);
  EXPECT_EQ(create_backend("cuda")->compute_dtype(), DType::kBF16);
  EXPECT_EQ(create_backend("cuda", DType::kBF16)->compute_dtype(), DType::kBF16);
  EXPECT_THROW(create_backend("cuda", DType::kF16), Error);
  EXPECT_THROW(create_backend("cuda", DType::kFP8E4M3), Error);
}

TEST_F(CudaFp32Test, EmbeddingIsAnExactCopy) {
  const int64_t v = 300, h = 24, t = 19;
  HostArray table(DType::kF32, rng_.normals(static_cast<size_t>(v * h)));
  std::vector<int32_t> ids(static_cast<size_t>(t));
  for (auto& id : ids) id = rng_.integer(0, static_cast<int32_t>(v - 1));
  auto dt = to_device(*gpu_, table);
  auto di = to_device(*gpu_, ids);
  Buffer out(*gpu_, static_cast<size_t>(t * h * 4));
  gpu_->embedding(dt.view({v, h}), di.view({t}), out.view(DType::kF32, {t, h}));
  const HostArray got = to_host(*gpu_, out.data(), DType::kF32, static_cast<size_t>(t * h));
  for (int64_t i = 0; i < t; ++i) {
    ASSERT_EQ(0, std::memcmp(got.bytes.data() + i * h * 4, table.bytes.data() + ids[static_cast<size_t>(i)] * h * 4,
                             static_cast<size_t>(h * 4)));
  }
}

TEST_F(CudaFp32Test, RmsNormAndAddRmsNorm) {
  for (int64_t h : {4096, 72, 100}) {  // 100: the unvectorized path
    const int64_t t = 13;
    const size_t n = static_cast<size_t>(t * h);
    HostArray x(DType::kF32, rng_.normals(n, 2.0f));
    HostArray res(DType::kF32, rng_.normals(n, 2.0f));
    HostArray w(DType::kF32, rng_.normals(static_cast<size_t>(h)));
    auto dx = to_device(*gpu_, x), dres = to_device(*gpu_, res), dw = to_device(*gpu_, w);
    Buffer out(*gpu_, n * 4);
    HostArray ref(DType::kF32, n);
    gpu_->rmsnorm(dx.view({t, h}), dw.view({h}), 1e-5f, out.view(DType::kF32, {t, h}));
    cpu_->rmsnorm(x.view({t, h}), w.view({h}), 1e-5f, ref.view({t, h}));
    EXPECT_LT(rel_error(get(out.data(), n), ref.values()), kElementwiseTol) << "rmsnorm H=" << h;

    gpu_->add_rmsnorm(dx.view({t, h}), dres.view({t, h}), dw.view({h}), 1e-5f, out.view(DType::kF32, {t, h}));
    cpu_->add_rmsnorm(x.view({t, h}), res.view({t, h}), w.view({h}), 1e-5f, ref.view({t, h}));
    // The residual stays fp32: one rounded add on both sides, so the same bits (no bf16 rounding).
    EXPECT_EQ(to_host(*gpu_, dres).bytes, res.bytes) << "add_rmsnorm residual H=" << h;
    EXPECT_LT(rel_error(get(out.data(), n), ref.values()), kElementwiseTol) << "add_rmsnorm H=" << h;
  }
}

TEST_F(CudaFp32Test, GemmIsTrueFp32) {
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape s : {Shape{1, 4096, 4096}, Shape{7, 384, 256}, Shape{130, 1000, 512}, Shape{3, 5, 24}}) {
    HostArray x(DType::kF32, rng_.normals(static_cast<size_t>(s.m * s.k)));
    HostArray w(DType::kF32, rng_.normals(static_cast<size_t>(s.n * s.k), 0.05f));
    HostArray bias(DType::kF32, rng_.normals(static_cast<size_t>(s.n)));
    auto dx = to_device(*gpu_, x), dw = to_device(*gpu_, w), db = to_device(*gpu_, bias);
    const size_t mn = static_cast<size_t>(s.m * s.n);
    HostArray ref(DType::kF32, mn);
    Buffer out(*gpu_, mn * 4);
    cpu_->gemm(x.view({s.m, s.k}), w.view({s.n, s.k}), nullptr, ref.view({s.m, s.n}));
    gpu_->gemm(dx.view({s.m, s.k}), dw.view({s.n, s.k}), nullptr, out.view(DType::kF32, {s.m, s.n}));
    EXPECT_LT(rel_error(get(out.data(), mn), ref.values()), kGemmTol) << s.m << "x" << s.n << "x" << s.k;
    const Tensor b = db.view({s.n});
    gpu_->gemm(dx.view({s.m, s.k}), dw.view({s.n, s.k}), &b, out.view(DType::kF32, {s.m, s.n}));
    std::vector<float> with_bias = ref.values();
    for (size_t i = 0; i < mn; ++i) with_bias[i] += bias.get(i % static_cast<size_t>(s.n));
    EXPECT_LT(rel_error(get(out.data(), mn), with_bias), kGemmTol) << "bias " << s.m << "x" << s.n << "x" << s.k;
  }
  // 1 + 2^-20 needs 21 mantissa bits: fp32 keeps it, TF32 (10 bits) would round it to 1. Every
  // partial sum of 16 of them is exact in fp32, so the result is exact in any order.
  const int64_t m = 2, n = 8, k = 16;
  auto dx = to_device(*gpu_, HostArray(DType::kF32, std::vector<float>(static_cast<size_t>(m * k), 1.0f + 0x1p-20f)));
  auto dw = to_device(*gpu_, HostArray(DType::kF32, std::vector<float>(static_cast<size_t>(n * k), 1.0f)));
  Buffer out(*gpu_, static_cast<size_t>(m * n * 4));
  gpu_->gemm(dx.view({m, k}), dw.view({n, k}), nullptr, out.view(DType::kF32, {m, n}));
  for (float v : get(out.data(), static_cast<size_t>(m * n))) ASSERT_EQ(v, 16.0f + 16.0f * 0x1p-20f);
}

TEST_F(CudaFp32Test, RopeAndSiluMul) {
  for (int64_t d : {128, 64, 8}) {
    const int64_t t = 21, hq = 8, hkv = 2;
    HostArray q(DType::kF32, rng_.normals(static_cast<size_t>(t * hq * d)));
    HostArray k(DType::kF32, rng_.normals(static_cast<size_t>(t * hkv * d)));
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (auto& p : pos) p = rng_.integer(0, 32768);
    HostArray freq(DType::kF32, static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i)
      freq.set(static_cast<size_t>(i), std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(d)));
    auto dq = to_device(*gpu_, q), dk = to_device(*gpu_, k), dp = to_device(*gpu_, pos), df = to_device(*gpu_, freq);
    gpu_->rope(dq.view({t, hq, d}), dk.view({t, hkv, d}), dp.view({t}), df.view({d / 2}));
    cpu_->rope(q.view({t, hq, d}), k.view({t, hkv, d}), test::view_of(pos, {t}), freq.view({d / 2}));
    EXPECT_LT(rel_error(to_host(*gpu_, dq).values(), q.values()), kElementwiseTol) << "rope q D=" << d;
    EXPECT_LT(rel_error(to_host(*gpu_, dk).values(), k.values()), kElementwiseTol) << "rope k D=" << d;
  }
  for (int64_t inter : {1408, 13}) {  // 13: the unvectorized path
    const int64_t t = 9;
    const size_t n = static_cast<size_t>(t * inter);
    HostArray gu(DType::kF32, rng_.normals(2 * n, 3.0f));
    auto dg = to_device(*gpu_, gu);
    Buffer out(*gpu_, n * 4);
    HostArray ref(DType::kF32, n);
    gpu_->silu_mul(dg.view({t, 2 * inter}), out.view(DType::kF32, {t, inter}));
    cpu_->silu_mul(gu.view({t, 2 * inter}), ref.view({t, inter}));
    EXPECT_LT(rel_error(get(out.data(), n), ref.values()), kElementwiseTol) << "silu_mul I=" << inter;
  }
}

// The fused RoPE and KV store on fp32 activations, into an fp32 and a bf16 pool (fp32 KV caches
// take head dims up to 128).
TEST_F(CudaFp32Test, RopeKvStoreIsRopeThenKvStore) {
  test::expect_rope_kv_store_is_rope_then_kv_store(*gpu_, DType::kF32, {DType::kF32, DType::kBF16}, 128, rng_);
}

// fp32 K/V (extremes included) through both backends into every storage dtype, fp32 included: the
// pools must be equal byte for byte. `offset` floats in front of the rows make them unaligned, so
// the unvectorized kernel runs too.
TEST_F(CudaFp32Test, KvStoreIsBitIdenticalToCpu) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kFP8E5M2, DType::kFP8E4M3}) {
    for (int64_t d : {8, 16, 32}) {
      for (int64_t offset : {0, 1}) {
        const int hkv = 3;
        const int64_t slots = 50, t = 11;
        KvScales scales = KvScales::ones(1, hkv);
        for (auto& s : scales.k) s = rng_.uniform(0.001f, 2.0f);
        for (auto& s : scales.v) s = rng_.uniform(0.001f, 2.0f);
        const KvCacheConfig cfg{1, hkv, static_cast<int>(d), dt, slots};
        auto gc = gpu_->create_kv_cache(cfg, scales);
        auto cc = cpu_->create_kv_cache(cfg, scales);
        const size_t n = static_cast<size_t>(t * hkv * d);
        std::vector<float> kv = rng_.normals(n + static_cast<size_t>(offset), 30.0f);
        const float extremes[] = {1e30f, -1e30f, INFINITY, -INFINITY, NAN, 1e-30f, -3e-8f, 448.5f, 57344.0f, 0.0f};
        for (size_t i = 0; i < std::size(extremes); ++i) kv[static_cast<size_t>(offset) + i * 7] = extremes[i];
        HostArray k(DType::kF32, kv), v(DType::kF32, rng_.normals(kv.size(), 100.0f));
        std::vector<int32_t> perm(static_cast<size_t>(slots - 1));
        std::iota(perm.begin(), perm.end(), 1);
        std::shuffle(perm.begin(), perm.end(), rng_.gen());
        ForwardBatch fb;  // one prompt of t tokens on table row 0, its slots scattered
        fb.add_sequence(0, static_cast<int>(t), std::vector<int32_t>(static_cast<size_t>(t), 0),
                        std::span<const int32_t>(perm.data(), static_cast<size_t>(t)));
        gpu_->reserve_steps(StepLimits{static_cast<int>(t), 1, hkv, hkv, static_cast<int>(d)});
        auto dk = to_device(*gpu_, k), dv = to_device(*gpu_, v);
        const auto at = [&](const test::DeviceArray& a) {
          return Tensor(static_cast<float*>(a.buf.data()) + offset, DType::kF32, {t, hkv, d});
        };
        gpu_->kv_store(at(dk), at(dv), gpu_->upload_batch(fb, *gc), gc->layer(0));
        cpu_->kv_store(Tensor(reinterpret_cast<float*>(k.bytes.data()) + offset, DType::kF32, {t, hkv, d}),
                       Tensor(reinterpret_cast<float*>(v.bytes.data()) + offset, DType::kF32, {t, hkv, d}),
                       cpu_->upload_batch(fb, *cc), cc->layer(0));
        for (int which = 0; which < 2; ++which) {
          const Tensor g = which ? gc->layer(0).v : gc->layer(0).k;
          const Tensor c = which ? cc->layer(0).v : cc->layer(0).k;
          const HostArray got = to_host(*gpu_, g.data, dt, static_cast<size_t>(g.numel()));
          ASSERT_EQ(0, std::memcmp(got.bytes.data(), c.data, c.nbytes()))
              << dtype_name(dt) << " D=" << d << " offset " << offset << (which ? " V" : " K");
        }
      }
    }
  }
}

const std::vector<std::vector<SeqShape>> kBatches = {
    // decode and extend rows mixed, short and long, a full prefill among them
    {{1, 1}, {1, 17}, {5, 45}, {1, 300}, {70, 70}, {1, 2000}, {130, 330}, {1, 129}},
    // decode only
    {{1, 5000}, {1, 64}, {1, 1000}, {1, 257}},
};

using Param = std::tuple<int, int, DType>;  // head_dim, group, KV dtype

class CudaFp32AttentionTest : public CudaFp32Test, public ::testing::WithParamInterface<Param> {};

// The pools are filled from the same fp32 K/V through kv_store on both backends (bit-identical, as
// checked above), so the only differences left are fp32 arithmetic order: any KV dtype gets the
// tight tolerance.
TEST_P(CudaFp32AttentionTest, RaggedBatchesMatchCpu) {
  const auto [d, group, dt] = GetParam();
  const int hkv = 4;
  const int hq = group * hkv;
  for (size_t bi = 0; bi < kBatches.size(); ++bi) {
    Scenario s = make_scenario(rng_, kBatches[bi]);
    KvScales scales = KvScales::ones(1, hkv);
    for (auto& x : scales.k) x = rng_.uniform(0.5f, 2.0f);
    for (auto& x : scales.v) x = rng_.uniform(0.5f, 2.0f);
    const KvCacheConfig cfg = s.kv_config(hkv, d, dt);
    gpu_->reserve_steps(s.limits(hq, hkv, d));
    auto gc = gpu_->create_kv_cache(cfg, scales);
    auto cc = cpu_->create_kv_cache(cfg, scales);
    const KvLayer gl = gc->layer(0), cl = cc->layer(0);
    const int64_t nf = s.fill.num_tokens();
    HostArray k(DType::kF32, rng_.normals(static_cast<size_t>(nf * hkv * d)));
    HostArray v(DType::kF32, rng_.normals(static_cast<size_t>(nf * hkv * d)));
    {
      auto dk = to_device(*gpu_, k), dv = to_device(*gpu_, v);
      gpu_->kv_store(dk.view({nf, hkv, d}), dv.view({nf, hkv, d}), gpu_->upload_batch(s.fill, *gc), gl);
      cpu_->kv_store(k.view({nf, hkv, d}), v.view({nf, hkv, d}), cpu_->upload_batch(s.fill, *cc), cl);
    }
    const int64_t t = s.step.num_tokens();
    const size_t n = static_cast<size_t>(t * hq * d);
    HostArray q(DType::kF32, rng_.normals(n, 1.5f));
    auto dq = to_device(*gpu_, q);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    Buffer out(*gpu_, n * 4);
    test::poison(*gpu_, out.data(), n * 4);
    const DeviceBatch gb = gpu_->upload_batch(s.step, *gc);
    gpu_->attention(dq.view({t, hq, d}), gl, gb, scale, out.view(DType::kF32, {t, hq, d}));
    const HostArray got = to_host(*gpu_, out.data(), DType::kF32, n);
    HostArray ref(DType::kF32, n);
    cpu_->attention(q.view({t, hq, d}), cl, cpu_->upload_batch(s.step, *cc), scale, ref.view({t, hq, d}));
    EXPECT_LT(rel_error(got.values(), ref.values()), kAttentionTol)
        << "batch " << bi << " D=" << d << " group=" << group << " kv=" << dtype_name(dt);
    // Run again: the same bits.
    test::poison(*gpu_, out.data(), n * 4);
    gpu_->attention(dq.view({t, hq, d}), gl, gb, scale, out.view(DType::kF32, {t, hq, d}));
    EXPECT_EQ(to_host(*gpu_, out.data(), DType::kF32, n).bytes, got.bytes) << "batch " << bi;
  }
}

INSTANTIATE_TEST_SUITE_P(GenericHeadDims, CudaFp32AttentionTest,
                         ::testing::Combine(::testing::Values(8, 16, 32, 64, 128), ::testing::Values(1, 2, 5),
                                            ::testing::Values(DType::kF32, DType::kBF16, DType::kF16, DType::kFP8E5M2,
                                                              DType::kFP8E4M3)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return "D" + std::to_string(std::get<0>(info.param)) + "_G" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });

// Expects `f` to throw serve8::Error whose message contains `part`.
template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// fp32 compute runs the generic kernel only: other head dims (96 here) are refused when the pool is
// made and at the attention entry point; bf16 activations never meet an fp32 pool.
TEST_F(CudaFp32Test, UnsupportedCombinationsAreErrors) {
  const auto ones = KvScales::ones(1, 2);
  expect_error([&] { gpu_->create_kv_cache({1, 2, 96, DType::kF32, 8}, ones); }, "head dims 8, 16, 32, 64 and 128");
  expect_error([&] { gpu_->create_kv_cache({1, 2, 96, DType::kBF16, 8}, ones); }, "head dims 8, 16, 32, 64 and 128");
  // A head_dim 96 pool made by a bf16 backend, handed to fp32 attention (either backend's entry).
  Rng rng(9);
  const Scenario s = make_scenario(rng, {{2, 4}});
  auto bf16 = create_backend("cuda", DType::kBF16);
  auto cache = bf16->create_kv_cache(s.kv_config(2, 96, DType::kBF16), ones);
  // gpu_ uploads into the bf16 backend's table; a pool of its own sizes its batch arrays.
  auto f32cache = gpu_->create_kv_cache(s.kv_config(2, 8, DType::kF32), ones);
  Buffer q(*gpu_, static_cast<size_t>(2 * 4 * 96 * 4));
  for (Backend* be : {gpu_.get(), bf16.get()}) {
    be->reserve_steps(s.limits(4, 2, 96));
    be->upload_batch(s.fill, *cache);
    const DeviceBatch b = be->upload_batch(s.step, *cache);
    expect_error(
        [&] {
          be->attention(q.view(DType::kF32, {2, 4, 96}), cache->layer(0), b, 0.1f, q.view(DType::kF32, {2, 4, 96}));
        },
        "head dims 8, 16, 32, 64 and 128");
  }
  // bf16 compute refuses an fp32 pool; bf16 K/V or q refuse an fp32 pool made by fp32 compute.
  expect_error([&] { bf16->create_kv_cache(s.kv_config(2, 8, DType::kF32), ones); }, "--dtype float32");
  Buffer kv16(*gpu_, static_cast<size_t>(2 * 2 * 8 * 2));
  gpu_->reserve_steps(s.limits(4, 2, 8));
  gpu_->upload_batch(s.fill, *f32cache);
  const DeviceBatch b = gpu_->upload_batch(s.step, *f32cache);
  expect_error(
      [&] {
        gpu_->kv_store(kv16.view(DType::kBF16, {2, 2, 8}), kv16.view(DType::kBF16, {2, 2, 8}), b, f32cache->layer(0));
      },
      "fp32 activations");
  Buffer q16(*gpu_, static_cast<size_t>(2 * 4 * 8 * 2));
  expect_error(
      [&] {
        gpu_->attention(q16.view(DType::kBF16, {2, 4, 8}), f32cache->layer(0), b, 0.1f,
                        q16.view(DType::kBF16, {2, 4, 8}));
      },
      "fp32 activations");
  // Mixed activation dtypes within one op.
  Buffer x(*gpu_, 4 * 64), w(*gpu_, 4 * 64);
  EXPECT_THROW(
      gpu_->rmsnorm(x.view(DType::kF32, {2, 8}), w.view(DType::kF32, {8}), 1e-5f, x.view(DType::kBF16, {2, 8})), Error);
  EXPECT_THROW(
      gpu_->gemm(x.view(DType::kF32, {2, 8}), w.view(DType::kBF16, {4, 8}), nullptr, x.view(DType::kF32, {2, 4})),
      Error);
}

}  // namespace
}  // namespace serve8
