// The CUDA backend's FP8 weight ops against the CPU reference: the same e4m3 bytes from per-row
// quantization, and the FP8 GEMMs (e4m3 inputs, and bf16 inputs for weight-only FP8) on every
// Llama-3-8B, Llama-2-13B and Llama-2-70B weight shape; and the same skinny kernel on bf16 weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/skinny_gemm.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace serve8::test {
namespace {

TEST_F(CudaBackendTest, Fp8QuantizationIsBitExact) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 4096}, {33, 1000}, {4, 16}}) {
    std::vector<float> v = rng_.normals(static_cast<size_t>(rows * cols), 2.0f);
    for (int64_t j = 0; j < cols; ++j) v[static_cast<size_t>(j)] = 0.0f;  // row 0 all zero
    HostArray x(DType::kBF16, v);
    HostArray xf(DType::kF32, x.values());  // the same numbers for the fp32 CPU
    HostArray q_ref(DType::kFP8E4M3, v.size()), s_ref(DType::kF32, static_cast<size_t>(rows));
    cpu_->quantize_fp8_rows(xf.view({rows, cols}), q_ref.view({rows, cols}), s_ref.view({rows}));
    auto dx = to_device(*gpu_, x);
    Buffer q(*gpu_, v.size()), s(*gpu_, static_cast<size_t>(rows) * 4);
    gpu_->quantize_fp8_rows(dx.view({rows, cols}), q.view(DType::kFP8E4M3, {rows, cols}), s.view(DType::kF32, {rows}));
    EXPECT_EQ(to_host(*gpu_, q.data(), DType::kFP8E4M3, v.size()).bytes, q_ref.bytes) << rows << "x" << cols;
    EXPECT_EQ(to_host(*gpu_, s.data(), DType::kF32, static_cast<size_t>(rows)).bytes, s_ref.bytes);
  }
}

// add_rmsnorm and silu_mul write FP8 rows of their output, byte for byte what quantize_fp8_rows
// makes of that output (so fused and unfused FP8 models agree exactly): rows held in registers
// (up to 8,192 for add_rmsnorm, 32,768 for silu_mul) and wider or odd rows, one element a time.
TEST_F(CudaBackendTest, FusedFp8RowsEqualQuantizingTheOutput) {
  for (const auto& [t, h] :
       {std::pair<int64_t, int64_t>{1, 4096}, {2, 5120}, {1, 8192}, {2, 8200}, {1, 32776}, {5, 576}, {3, 100}}) {
    HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(t * h), 3.0f));
    HostArray res(DType::kBF16, rng_.normals(static_cast<size_t>(t * h), 3.0f));
    HostArray w(DType::kBF16, rng_.normals(static_cast<size_t>(h)));
    HostArray gu(DType::kBF16, rng_.normals(static_cast<size_t>(t * 2 * h), 2.0f));
    auto dx = to_device(*gpu_, x), dres = to_device(*gpu_, res), dw = to_device(*gpu_, w), dgu = to_device(*gpu_, gu);
    Buffer out(*gpu_, static_cast<size_t>(t * h) * 2), q(*gpu_, static_cast<size_t>(t * h)),
        s(*gpu_, static_cast<size_t>(t) * 4), q2(*gpu_, static_cast<size_t>(t * h)),
        s2(*gpu_, static_cast<size_t>(t) * 4);
    const Tensor tout = out.view(DType::kBF16, {t, h});
    const Fp8Rows rows{q.view(DType::kFP8E4M3, {t, h}), s.view(DType::kF32, {t})};
    const auto expect_same = [&](const char* op) {
      gpu_->quantize_fp8_rows(tout, q2.view(DType::kFP8E4M3, {t, h}), s2.view(DType::kF32, {t}));
      EXPECT_EQ(to_host(*gpu_, q.data(), DType::kFP8E4M3, static_cast<size_t>(t * h)).bytes,
                to_host(*gpu_, q2.data(), DType::kFP8E4M3, static_cast<size_t>(t * h)).bytes)
          << op << " " << t << "x" << h;
      EXPECT_EQ(to_host(*gpu_, s.data(), DType::kF32, static_cast<size_t>(t)).bytes,
                to_host(*gpu_, s2.data(), DType::kF32, static_cast<size_t>(t)).bytes)
          << op << " " << t << "x" << h;
    };
    gpu_->add_rmsnorm(dx.view({t, h}), dres.view({t, h}), dw.view({h}), 1e-5f, tout, &rows);
    expect_same("add_rmsnorm");
    gpu_->silu_mul(dgu.view({t, 2 * h}), tout, &rows);
    expect_same("silu_mul");
  }
}

// Every weight matrix of the three models, as [N, K]: fused QKV, O, fused gate/up, down.
struct WeightShape {
  const char* model;
  int64_t n, k;
};
constexpr WeightShape kLlamaShapes[] = {
    {"llama-3-8b qkv", 6144, 4096},
    {"llama-3-8b o", 4096, 4096},
    {"llama-3-8b gate_up", 28672, 4096},
    {"llama-3-8b down", 4096, 14336},
    {"llama-2-13b qkv", 15360, 5120},
    {"llama-2-13b o", 5120, 5120},
    {"llama-2-13b gate_up", 27648, 5120},
    {"llama-2-13b down", 5120, 13824},
    {"llama-2-70b qkv", 10240, 8192},
    {"llama-2-70b o", 8192, 8192},
    {"llama-2-70b gate_up", 57344, 8192},
    {"llama-2-70b down", 8192, 28672},
    {"smollm2 qkv", 960, 576},
    {"smollm2 down", 576, 1536},
};

// Random e4m3 codes, NaN's two codes (0x7f, 0xff) excluded.
HostArray random_e4m3(Rng& rng, int64_t n) {
  HostArray a(DType::kFP8E4M3, static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t r = rng.gen()();
    for (int64_t b = i; b < std::min(n, i + 8); ++b, r >>= 8)
      a.bytes[static_cast<size_t>(b)] = (r & 0x7f) == 0x7f ? 0x7e : static_cast<uint8_t>(r);
  }
  return a;
}

// The first `checked` channels of each row of the GPU's [m, s.n] output (what the CPU reference
// computed); a test failure where any output was left unwritten (the poison reads as NaN).
std::vector<float> checked_channels(const std::vector<float>& all, int64_t m, const WeightShape& s, int64_t checked) {
  std::vector<float> got;
  size_t nan = 0;
  for (int64_t r = 0; r < m; ++r) got.insert(got.end(), all.begin() + r * s.n, all.begin() + r * s.n + checked);
  for (float v : all) nan += std::isnan(v);
  EXPECT_EQ(nan, 0u) << s.model << " M=" << m << ": outputs left unwritten";
  return got;
}

TEST_F(CudaBackendTest, Fp8GemmMatchesCpuOnLlamaShapes) {
  // The GPU computes the whole [M, N]; the CPU reference the first kChecked output channels (its
  // GEMM on a 57344 x 8192 matrix would take most of the test's time). M up to 16 takes the skinny
  // kernel (token tiles of 8 and 16 rows), 17-64 its TMA kernel (32 and 64; clusters of 1-8 K
  // splits on these shapes) or cuBLASLt where gemm_choices_table.inc says, 200 cuBLASLt.
  constexpr int64_t kChecked = 256;
  const auto codes = [this](int64_t n) { return random_e4m3(rng_, n); };
  for (const WeightShape& s : kLlamaShapes) {
    const HostArray wq = codes(s.n * s.k);
    std::vector<float> wsv(static_cast<size_t>(s.n));
    for (float& f : wsv) f = rng_.uniform(1e-4f, 1e-3f);
    HostArray ws(DType::kF32, wsv);
    auto dwq = to_device(*gpu_, wq), dws = to_device(*gpu_, ws);
    for (const int64_t m : {1, 3, 9, 16, 17, 32, 33, 64, 200}) {
      HostArray xq = codes(m * s.k);
      std::vector<float> xsv(static_cast<size_t>(m));
      for (float& f : xsv) f = rng_.uniform(0.002f, 0.02f);
      HostArray xs(DType::kF32, xsv), ref(DType::kF32, static_cast<size_t>(m * kChecked));
      const Tensor w_host(const_cast<uint8_t*>(wq.bytes.data()), DType::kFP8E4M3, {s.n, s.k});
      cpu_->gemm_fp8(xq.view({m, s.k}), xs.view({m}), w_host.rows(0, kChecked), ws.view({s.n}).rows(0, kChecked),
                     nullptr, ref.view({m, kChecked}));
      auto dxq = to_device(*gpu_, xq), dxs = to_device(*gpu_, xs);
      Buffer out(*gpu_, static_cast<size_t>(m * s.n) * 2);
      poison(*gpu_, out.data(), out.bytes());
      gpu_->gemm_fp8(dxq.view({m, s.k}), dxs.view({m}), dwq.view({s.n, s.k}), dws.view({s.n}), nullptr,
                     out.view(DType::kBF16, {m, s.n}));
      const HostArray first = to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(m * s.n));
      const std::vector<float> all = first.values();
      // The same bytes every run.
      gpu_->gemm_fp8(dxq.view({m, s.k}), dxs.view({m}), dwq.view({s.n, s.k}), dws.view({s.n}), nullptr,
                     out.view(DType::kBF16, {m, s.n}));
      EXPECT_EQ(to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(m * s.n)).bytes, first.bytes)
          << s.model << " M=" << m << ": a second run differs";
      const std::vector<float> got = checked_channels(all, m, s, kChecked);
      // The products of e4m3 codes are exact in fp32; what remains is the summation order and the
      // bf16 output (half an ulp: 2^-9 relative).
      EXPECT_LT(rel_error(got, ref.values()), 4e-3) << s.model << " M=" << m;
    }
  }
}

// Weight-only FP8 (bf16 inputs): the skinny kernel's bf16 variant up to 16 rows, a widened matrix
// and cuBLASLt above, against the CPU's codes-times-input sums.
TEST_F(CudaBackendTest, Fp8WeightOnlyGemmMatchesCpuOnLlamaShapes) {
  constexpr int64_t kChecked = 256;
  StepLimits limits{256, 8, 8, 8, 128};
  for (const WeightShape& s : kLlamaShapes)
    limits.fp8_weight_only_elems = std::max(limits.fp8_weight_only_elems, s.n * s.k);
  gpu_->reserve_steps(limits);
  for (const WeightShape& s : kLlamaShapes) {
    const HostArray wq = random_e4m3(rng_, s.n * s.k);
    std::vector<float> wsv(static_cast<size_t>(s.n));
    for (float& f : wsv) f = rng_.uniform(1e-4f, 1e-3f);
    HostArray ws(DType::kF32, wsv);
    auto dwq = to_device(*gpu_, wq), dws = to_device(*gpu_, ws);
    // Each token tile of the skinny kernel (8, 16, 32 rows), the TMA kernel (40, 64), then the widened matrix.
    for (const int64_t m : {int64_t{1}, int64_t{9}, int64_t{16}, int64_t{17}, int64_t{40}, int64_t{64}, int64_t{65}}) {
      HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(m * s.k), 2.0f));
      HostArray xf(DType::kF32, x.values()), ref(DType::kF32, static_cast<size_t>(m * kChecked));
      const Tensor w_host(const_cast<uint8_t*>(wq.bytes.data()), DType::kFP8E4M3, {s.n, s.k});
      cpu_->gemm_fp8_weights(xf.view({m, s.k}), w_host.rows(0, kChecked), ws.view({s.n}).rows(0, kChecked), nullptr,
                             ref.view({m, kChecked}));
      auto dx = to_device(*gpu_, x);
      Buffer out(*gpu_, static_cast<size_t>(m * s.n) * 2);
      poison(*gpu_, out.data(), out.bytes());
      gpu_->gemm_fp8_weights(dx.view({m, s.k}), dwq.view({s.n, s.k}), dws.view({s.n}), nullptr,
                             out.view(DType::kBF16, {m, s.n}));
      const std::vector<float> all = to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(m * s.n)).values();
      const std::vector<float> got = checked_channels(all, m, s, kChecked);
      // e4m3 codes times bf16 inputs are exact in fp32 (and a code times its scale rounds once to
      // bf16 where the matrix is widened); the rest is summation order and the bf16 output.
      EXPECT_LT(rel_error(got, ref.values()), 4e-3) << s.model << " M=" << m;
    }
  }
  // With a bias, and the widened path refused by name where no matrix was reserved for it.
  const int64_t n = 48, k = 64, m = 72;
  HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(m * k))), xf(DType::kF32, x.values());
  HostArray wq(DType::kFP8E4M3, rng_.normals(static_cast<size_t>(n * k), 50.0f));
  HostArray ws(DType::kF32, std::vector<float>(static_cast<size_t>(n), 0.002f));
  HostArray bias(DType::kBF16, rng_.normals(static_cast<size_t>(n))), bias32(DType::kF32, bias.values());
  auto dx = to_device(*gpu_, x), dwq = to_device(*gpu_, wq), dws = to_device(*gpu_, ws), db = to_device(*gpu_, bias);
  Buffer out(*gpu_, static_cast<size_t>(m * n) * 2);
  const Tensor cb = bias32.view({n}), gb = db.view({n});
  for (const int64_t rows : {int64_t{2}, int64_t{20}, m}) {
    HostArray ref(DType::kF32, static_cast<size_t>(rows * n));
    cpu_->gemm_fp8_weights(xf.view({m, k}).rows(0, rows), wq.view({n, k}), ws.view({n}), &cb, ref.view({rows, n}));
    gpu_->gemm_fp8_weights(dx.view({m, k}).rows(0, rows), dwq.view({n, k}), dws.view({n}), &gb,
                           out.view(DType::kBF16, {rows, n}));
    EXPECT_LT(rel_error(to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(rows * n)).values(), ref.values()),
              4e-3)
        << "M=" << rows;
  }
  auto fresh = create_backend("cuda", DType::kBF16);
  EXPECT_THROW(fresh->gemm_fp8_weights(dx.view({m, k}), dwq.view({n, k}), dws.view({n}), nullptr,
                                       out.view(DType::kBF16, {m, n})),
               Error);
}

TEST_F(CudaBackendTest, Fp8GemmWithBiasAndRefusals) {
  // Two channel tiles, the second part past N, and two K splits for the TMA kernel.
  const int64_t n = 200, k = 256;
  for (const int64_t m : {1, 5, 17, 40, 65}) {  // the skinny kernel, its TMA kernel, then cuBLASLt
    HostArray xq(DType::kFP8E4M3, rng_.normals(static_cast<size_t>(m * k), 50.0f));
    HostArray wq(DType::kFP8E4M3, rng_.normals(static_cast<size_t>(n * k), 50.0f));
    HostArray xs(DType::kF32, std::vector<float>(static_cast<size_t>(m), 0.01f));
    HostArray ws(DType::kF32, std::vector<float>(static_cast<size_t>(n), 0.002f));
    HostArray bias(DType::kBF16, rng_.normals(static_cast<size_t>(n))), ref(DType::kF32, static_cast<size_t>(m * n));
    HostArray bias32(DType::kF32, bias.values());
    const Tensor cb = bias32.view({n});
    cpu_->gemm_fp8(xq.view({m, k}), xs.view({m}), wq.view({n, k}), ws.view({n}), &cb, ref.view({m, n}));
    auto dxq = to_device(*gpu_, xq), dwq = to_device(*gpu_, wq), dxs = to_device(*gpu_, xs), dws = to_device(*gpu_, ws),
         db = to_device(*gpu_, bias);
    Buffer out(*gpu_, static_cast<size_t>(m * n) * 2);
    const Tensor gb = db.view({n});
    gpu_->gemm_fp8(dxq.view({m, k}), dxs.view({m}), dwq.view({n, k}), dws.view({n}), &gb,
                   out.view(DType::kBF16, {m, n}));
    EXPECT_LT(rel_error(to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(m * n)).values(), ref.values()),
              4e-3)
        << "M=" << m;
    // K not a multiple of 16 is refused by name, not left to a kernel.
    EXPECT_THROW(gpu_->gemm_fp8(dxq.view({m, 8}), dxs.view({m}), dwq.view({n, 8}), dws.view({n}), nullptr,
                                out.view(DType::kBF16, {m, n})),
                 Error);
  }
}

// 17-64 e4m3 rows and 33-64 bf16 rows take the TMA kernel itself (a refused launch would leave the
// output to cuBLASLt or the widened matrix, and the tests above would not tell): clusters of K
// splits, and one unsplit tile.
TEST_F(CudaBackendTest, Fp8GemmTmaKernelRunsWhereItsPlanSays) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  SkinnyGemm skinny(sms);
  struct Case {
    int64_t m, n, k;
    bool bf16;
  };
  for (const Case& c :
       {Case{40, 512, 4096, false}, Case{24, 96, 128, false}, Case{48, 512, 4096, true}, Case{33, 200, 256, true}}) {
    const int64_t m = c.m, n = c.n, k = c.k;
    const SkinnyGemmPlan plan = skinny.plan(m, n, k, c.bf16);
    ASSERT_TRUE(plan.tma) << m << "x" << n << "x" << k << (c.bf16 ? " bf16" : " e4m3");
    HostArray xq = random_e4m3(rng_, m * k), wq = random_e4m3(rng_, n * k);
    HostArray xb(DType::kBF16, bf16_values(rng_.normals(static_cast<size_t>(m * k))));
    HostArray xs(DType::kF32, std::vector<float>(static_cast<size_t>(m), 0.01f));
    HostArray ws(DType::kF32, std::vector<float>(static_cast<size_t>(n), 0.003f)), ref(DType::kF32, size_t(m * n));
    if (c.bf16) {
      HostArray xf(DType::kF32, xb.values());
      cpu_->gemm_fp8_weights(xf.view({m, k}), wq.view({n, k}), ws.view({n}), nullptr, ref.view({m, n}));
    } else {
      cpu_->gemm_fp8(xq.view({m, k}), xs.view({m}), wq.view({n, k}), ws.view({n}), nullptr, ref.view({m, n}));
    }
    auto dx = to_device(*gpu_, c.bf16 ? xb : xq), dwq = to_device(*gpu_, wq), dxs = to_device(*gpu_, xs),
         dws = to_device(*gpu_, ws);
    Buffer out(*gpu_, static_cast<size_t>(m * n) * 2);
    poison(*gpu_, out.data(), out.bytes());
    SkinnyGemmArgs a;
    a.x = dx.buf.data();
    a.x_bf16 = c.bf16;
    a.w = static_cast<const uint8_t*>(dwq.buf.data());
    a.x_scale = c.bf16 ? nullptr : static_cast<const float*>(dxs.buf.data());
    a.w_scale = static_cast<const float*>(dws.buf.data());
    a.out = out.data();
    a.m = m;
    a.n = n;
    a.k = k;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the backend's copies are on its own stream
    ASSERT_TRUE(skinny.run(a, plan, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(rel_error(to_host(*gpu_, out.data(), DType::kBF16, size_t(m * n)).values(), ref.values()), 4e-3)
        << m << "x" << n << "x" << k << (c.bf16 ? " bf16" : " e4m3") << ", " << plan.splits << " splits";
  }
}

// bf16 weights in the skinny kernel (1-16 rows), run as planned (the backend takes it only where
// the measured table says): Llama shapes' first channels, then a bias, fp32 output, a partial
// channel tile and forced K splits. bf16 products are exact in fp32; the rest is summation order.
TEST_F(CudaBackendTest, SkinnyGemmOnBf16WeightsMatchesCpu) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  SkinnyGemm skinny(sms);
  constexpr int64_t kChecked = 256;
  const auto run = [&](int64_t m, int64_t n, int64_t k, const HostArray& w, const HostArray* bias, bool out_f32,
                       const SkinnyGemmPlan& plan, const std::string& what) {
    ASSERT_NE(plan.token_tile, 0) << what;
    const int64_t checked = std::min(n, kChecked);
    HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(m * k), 2.0f));
    HostArray xf(DType::kF32, x.values()), ref(DType::kF32, static_cast<size_t>(m * checked));
    std::vector<float> wv = w.values();
    wv.resize(static_cast<size_t>(checked * k));
    HostArray wf(DType::kF32, wv);
    std::optional<HostArray> bf;
    if (bias) bf.emplace(DType::kF32, bias->values());
    const Tensor cb = bf ? bf->view({n}).rows(0, checked) : Tensor();
    cpu_->gemm(xf.view({m, k}), wf.view({checked, k}), bf ? &cb : nullptr, ref.view({m, checked}));
    auto dx = to_device(*gpu_, x), dw = to_device(*gpu_, w);
    std::optional<DeviceArray> db;
    if (bias) db.emplace(to_device(*gpu_, *bias));
    const size_t out_bytes = static_cast<size_t>(m * n) * (out_f32 ? 4 : 2);
    Buffer out(*gpu_, out_bytes);
    poison(*gpu_, out.data(), out_bytes);
    SkinnyGemmArgs a;
    a.x = dx.buf.data();
    a.x_bf16 = a.w_bf16 = true;
    a.w = static_cast<const uint8_t*>(dw.buf.data());
    a.bias = db ? db->buf.data() : nullptr;
    a.out = out.data();
    a.out_f32 = out_f32;
    a.m = m;
    a.n = n;
    a.k = k;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the backend's copies are on its own stream
    ASSERT_TRUE(skinny.run(a, plan, nullptr)) << what;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> all =
        to_host(*gpu_, out.data(), out_f32 ? DType::kF32 : DType::kBF16, static_cast<size_t>(m * n)).values();
    const std::vector<float> got = checked_channels(all, m, WeightShape{what.c_str(), n, k}, checked);
    EXPECT_LT(rel_error(got, ref.values()), out_f32 ? 1e-5 : 4e-3) << what << ", " << plan.splits << " splits";
  };
  for (const WeightShape& s : kLlamaShapes) {
    if (s.n * s.k > (int64_t{64} << 20)) continue;  // host memory: the gate_up matrices and 70B's
    const HostArray w(DType::kBF16, rng_.normals(static_cast<size_t>(s.n * s.k), 0.05f));
    for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{9}, int64_t{16}})
      run(m, s.n, s.k, w, nullptr, false, skinny.plan(m, s.n, s.k, true, true),
          std::string(s.model) + " M=" + std::to_string(m));
  }
  const int64_t n = 200, k = 1024;
  const HostArray w(DType::kBF16, rng_.normals(static_cast<size_t>(n * k), 0.05f));
  const HostArray bias(DType::kBF16, rng_.normals(static_cast<size_t>(n)));
  for (const int splits : {1, 3, 8})
    for (const int64_t m : {int64_t{3}, int64_t{16}})
      run(m, n, k, w, &bias, true, skinny_gemm_with_splits(m, n, 2 * k, splits),
          "200x1024 bias fp32 M=" + std::to_string(m));
  // More than 16 rows and e4m3 tokens are not the bf16 variant's.
  EXPECT_EQ(skinny.plan(17, n, k, true, true).token_tile, 0);
  EXPECT_EQ(skinny.plan(4, n, k, false, true).token_tile, 0);
  // Through the backend's gemm on a Llama shape: the skinny kernel where this GPU's table says so
  // (H100), cuBLASLt elsewhere; the same sums either way.
  const WeightShape o = kLlamaShapes[1];
  const HostArray wo(DType::kBF16, rng_.normals(static_cast<size_t>(o.n * o.k), 0.05f));
  std::vector<float> wov = wo.values();
  wov.resize(static_cast<size_t>(kChecked * o.k));
  HostArray wof(DType::kF32, wov);
  auto dwo = to_device(*gpu_, wo);
  for (const int64_t m : {int64_t{1}, int64_t{5}, int64_t{16}}) {
    const HostArray x(DType::kBF16, rng_.normals(static_cast<size_t>(m * o.k), 2.0f));
    HostArray xf(DType::kF32, x.values());
    HostArray ref(DType::kF32, static_cast<size_t>(m * kChecked));
    cpu_->gemm(xf.view({m, o.k}), wof.view({kChecked, o.k}), nullptr, ref.view({m, kChecked}));
    auto dx = to_device(*gpu_, x);
    Buffer out(*gpu_, static_cast<size_t>(m * o.n) * 2);
    poison(*gpu_, out.data(), out.bytes());
    gpu_->gemm(dx.view({m, o.k}), dwo.view({o.n, o.k}), nullptr, out.view(DType::kBF16, {m, o.n}));
    const std::vector<float> all = to_host(*gpu_, out.data(), DType::kBF16, static_cast<size_t>(m * o.n)).values();
    EXPECT_LT(rel_error(checked_channels(all, m, o, kChecked), ref.values()), 4e-3) << "gemm M=" << m;
  }
}

}  // namespace
}  // namespace serve8::test
