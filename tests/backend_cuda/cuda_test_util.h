// Helpers of the CUDA backend tests: a fixture that skips without a GPU and holds both backends,
// copies between host arrays and device tensors, and error measures against the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"

namespace serve8::test {

// A device array of one dtype, owning its memory.
struct DeviceArray {
  Buffer buf;
  DType dtype = DType::kF32;
  size_t n = 0;
  Tensor view(std::initializer_list<int64_t> dims) const { return Tensor(buf.data(), dtype, dims); }
};

inline DeviceArray to_device(Backend& be, const HostArray& h) {
  DeviceArray d{Buffer(be, h.bytes.size()), h.dtype, h.size()};
  be.copy_to_device(d.buf.data(), h.bytes.data(), h.bytes.size());
  return d;
}

inline DeviceArray to_device(Backend& be, const std::vector<int32_t>& v) {
  DeviceArray d{Buffer(be, v.size() * 4), DType::kI32, v.size()};
  be.copy_to_device(d.buf.data(), v.data(), v.size() * 4);
  return d;
}

inline HostArray to_host(Backend& be, const void* data, DType t, size_t n) {
  HostArray h(t, n);
  be.copy_to_host(h.bytes.data(), data, h.bytes.size());
  return h;
}

inline HostArray to_host(Backend& be, const DeviceArray& d) { return to_host(be, d.buf.data(), d.dtype, d.n); }

// Fills device memory with 0xff bytes (NaN in every float format), so unwritten outputs show.
inline void poison(Backend& be, void* data, size_t bytes) {
  std::vector<uint8_t> ff(bytes, 0xff);
  be.copy_to_device(data, ff.data(), bytes);
}

// ||a - b|| / ||b||, and NaN anywhere fails.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Values of `v` rounded to bf16, so that the CPU (fp32) and GPU (bf16) see the same numbers.
inline std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

// rope_kv_store on one QKV row per token against rope then kv_store on q, k and v apart, on `gpu`
// (activations `act`): q, k and each pool in `pools` equal byte for byte, over head dims up to
// max_head_dim that take the fused kernel and one that does not.
inline void expect_rope_kv_store_is_rope_then_kv_store(Backend& gpu, DType act, std::initializer_list<DType> pools,
                                                       int64_t max_head_dim, Rng& rng) {
  for (DType dt : pools) {
    for (const auto& [d, hq, hkv] :
         {std::tuple<int64_t, int64_t, int64_t>{128, 32, 8}, {64, 8, 2}, {256, 8, 1}, {16, 4, 2}, {8, 4, 2}}) {
      if (d > max_head_dim || (kv_dtype_is_rotated(dt) && d != 64 && d != 128)) continue;
      const int64_t slots = 64, t = 13;
      KvScales scales = KvScales::ones(1, static_cast<int>(hkv));
      for (auto& s : scales.k) s = rng.uniform(0.01f, 2.0f);
      for (auto& s : scales.v) s = rng.uniform(0.01f, 2.0f);
      const KvCacheConfig cfg{1, static_cast<int>(hkv), static_cast<int>(d), dt, slots};
      auto split_cache = gpu.create_kv_cache(cfg, scales);
      auto fused_cache = gpu.create_kv_cache(cfg, scales);
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
      gpu.reserve_steps(
          StepLimits{static_cast<int>(t), 1, static_cast<int>(hq), static_cast<int>(hkv), static_cast<int>(d)});
      auto dp = to_device(gpu, pos), df = to_device(gpu, freq), dv = to_device(gpu, v);
      auto q1 = to_device(gpu, q), k1 = to_device(gpu, k);
      gpu.rope(q1.view({t, hq, d}), k1.view({t, hkv, d}), dp.view({t}), df.view({d / 2}));
      gpu.kv_store(k1.view({t, hkv, d}), dv.view({t, hkv, d}), gpu.upload_batch(fb, *split_cache),
                   split_cache->layer(0));
      auto qkv = to_device(gpu, qkv_rows(q, k, v, t)), q2 = to_device(gpu, HostArray(act, q.size()));
      gpu.rope_kv_store(qkv.view({t, hq + 2 * hkv, d}), q2.view({t, hq, d}), dp.view({t}), df.view({d / 2}),
                        gpu.upload_batch(fb, *fused_cache), fused_cache->layer(0));
      const std::string what = std::string(dtype_name(dt)) + " D=" + std::to_string(d);
      EXPECT_EQ(to_host(gpu, q1).bytes, to_host(gpu, q2).bytes) << what << " q";
      EXPECT_EQ(to_host(gpu, k1).bytes, row_slices(to_host(gpu, qkv), t, hq * d, hkv * d).bytes) << what << " k";
      for (int which = 0; which < 3; ++which) {  // K, V, and int8/int4 rows' parameters
        const KvLayer sl = split_cache->layer(0), fl = fused_cache->layer(0);
        const Tensor a = which == 2 ? sl.row_params : which ? sl.v : sl.k;
        const Tensor b = which == 2 ? fl.row_params : which ? fl.v : fl.k;
        if (a.empty()) continue;
        EXPECT_EQ(to_host(gpu, a.data, a.dtype, static_cast<size_t>(a.numel())).bytes,
                  to_host(gpu, b.data, b.dtype, static_cast<size_t>(b.numel())).bytes)
            << what
            << (which == 2 ? " row parameters"
                : which    ? " V"
                           : " K");
      }
    }
  }
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible";
    gpu_ = create_backend("cuda");
    cpu_ = create_backend("cpu");
  }
  std::unique_ptr<Backend> gpu_, cpu_;
  Rng rng_{1234};
};

}  // namespace serve8::test
