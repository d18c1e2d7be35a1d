// Times the CUDA backend's attention and GEMM on the GPU against the machine's own ceilings: the
// device-to-device copy bandwidth for decode (memory bound) and the bf16 GEMM rate for prefill
// (compute bound), measured in the same run. Prints one table; run by `scripts/gpu.sh bench`.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"

namespace serve8 {
namespace {

// Median milliseconds of `fn` over `reps` runs after 3 warm-ups, timed with events on the stream.
template <typename F>
double time_ms(cudaStream_t s, int reps, F&& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> t;
  cudaEvent_t a, b;
  SERVE8_CUDA_CHECK(cudaEventCreate(&a));
  SERVE8_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    SERVE8_CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    SERVE8_CUDA_CHECK(cudaEventRecord(b, s));
    SERVE8_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SERVE8_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Fills n bytes of device memory with valid values of dtype t (no NaN codes), tiling a 4 MiB block.
void fill_random(Backend& be, void* dst, size_t bytes, DType t, std::mt19937_64& gen) {
  const size_t block = std::min<size_t>(bytes, 4u << 20);
  std::vector<uint8_t> h(block);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t es = dtype_size(t);
  for (size_t i = 0; i + es <= block; i += es) {
    const float x = nd(gen);
    switch (t) {
      case DType::kBF16: {
        const uint16_t v = f32_to_bf16(x);
        std::memcpy(&h[i], &v, 2);
        break;
      }
      case DType::kF16: {
        const uint16_t v = f32_to_f16(x);
        std::memcpy(&h[i], &v, 2);
        break;
      }
      case DType::kFP8E5M2:
        h[i] = f32_to_e5m2(x);
        break;
      case DType::kFP8E4M3:
        h[i] = f32_to_e4m3(x);
        break;
      default:
        break;
    }
  }
  for (size_t off = 0; off < bytes; off += block)
    be.copy_to_device(static_cast<char*>(dst) + off, h.data(), std::min(block, bytes - off));
}

struct AttnCase {
  const char* name;
  int batch, q_len, kv_len;
};

void run() {
  auto be_owner = create_backend("cuda");
  auto& be = dynamic_cast<CudaBackend&>(*be_owner);
  const cudaStream_t s = be.stream();
  std::mt19937_64 gen(1);
  std::printf("device: %s\n", be.device_description().c_str());

  // Ceiling 1: device-to-device copy, bytes read + written.
  const size_t copy_bytes = size_t{4} << 30;
  Buffer src(be, copy_bytes), dst(be, copy_bytes);
  const double copy_ms = time_ms(s, 10, [&] {
    SERVE8_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, s));
  });
  const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / copy_ms / 1e6;
  src.reset();
  dst.reset();
  std::printf("copy bandwidth: %.0f GB/s (read + write)\n", copy_gbs);

  // Ceiling 2 and the GEMM shapes of a Llama-3-8B layer.
  std::printf("\n%-34s %10s %12s\n", "gemm (bf16 in, fp32 acc)", "ms", "TFLOP/s");
  for (const auto& [m, n, k] : {std::tuple{8192, 8192, 8192}, std::tuple{4096, 28672, 4096},
                                std::tuple{64, 28672, 4096}, std::tuple{1, 6144, 4096}}) {
    Buffer x(be, size_t(m) * k * 2), w(be, size_t(n) * k * 2), o(be, size_t(m) * n * 2);
    fill_random(be, x.data(), x.bytes(), DType::kBF16, gen);
    fill_random(be, w.data(), w.bytes(), DType::kBF16, gen);
    const Tensor tx = x.view(DType::kBF16, {m, k}), tw = w.view(DType::kBF16, {n, k}),
                 to = o.view(DType::kBF16, {m, n});
    const double ms = time_ms(s, 20, [&] { be.gemm(tx, tw, nullptr, to); });
    char label[64];
    std::snprintf(label, sizeof(label), "M=%d N=%d K=%d", m, n, k);
    std::printf("%-34s %10.3f %12.1f\n", label, ms, 2.0 * m * n * k / ms / 1e9);
  }

  // Sampling a Llama-3 vocabulary: greedy, and temperature with top_p (the sort-free selection).
  std::printf("\n%-34s %10s\n", "sample (V=128256, includes the sync)", "ms");
  for (const int b : {1, 64}) {
    for (const bool greedy : {true, false}) {
      const int64_t v = 128256;
      Buffer logits(be, size_t(b) * v * 4);
      std::vector<float> h(size_t(b) * v);
      std::normal_distribution<float> nd(0.0f, 3.0f);
      for (float& x : h) x = nd(gen);
      be.copy_to_device(logits.data(), h.data(), h.size() * 4);
      std::vector<SamplingRow> rows(static_cast<size_t>(b));
      for (auto& r : rows) {
        r.temperature = greedy ? 0.0f : 0.7f;
        r.top_p = 0.9f;
      }
      std::vector<int32_t> ids(static_cast<size_t>(b));
      const Tensor tl = logits.view(DType::kF32, {b, v});
      const double ms = time_ms(s, 10, [&] { be.sample(tl, rows, ids.data()); });
      char label[64];
      std::snprintf(label, sizeof(label), "B=%d %s", b, greedy ? "greedy" : "T=0.7 top_p=0.9");
      std::printf("%-34s %10.3f\n", label, ms);
    }
  }

  // Attention, Llama-3-8B heads: 32 q heads, 8 kv heads, head_dim 128.
  const int hq = 32, hkv = 8, d = 128;
  const AttnCase cases[] = {{"decode B=1 kv=32768", 1, 1, 32768},     {"decode B=16 kv=4096", 16, 1, 4096},
                            {"decode B=64 kv=1024", 64, 1, 1024},     {"decode B=128 kv=2048", 128, 1, 2048},
                            {"prefill B=1 q=kv=4096", 1, 4096, 4096}, {"extend B=4 q=512 kv=2048", 4, 512, 2048}};
  StepLimits limits{0, 0, hq, hkv, d};
  for (const AttnCase& c : cases) {
    limits.max_tokens = std::max(limits.max_tokens, c.batch * c.q_len);
    limits.max_seqs = std::max(limits.max_seqs, c.batch);
  }
  be.reserve_steps(limits);
  std::printf("\n%-26s %-9s %9s %10s %8s %10s\n", "attention (32/8 heads, d128)", "kv", "ms", "GB/s", "%copy",
              "TFLOP/s");
  for (const AttnCase& c : cases) {
    const int64_t tokens = int64_t{c.batch} * c.kv_len;
    std::vector<int32_t> perm(static_cast<size_t>(tokens));
    std::iota(perm.begin(), perm.end(), 1);
    std::shuffle(perm.begin(), perm.end(), gen);  // page size 1, slots scattered
    ForwardBatch fb;  // sequence b on table row b, a fresh row: all its slots are new
    for (int b = 0; b < c.batch; ++b) {
      fb.add_sequence(b, c.kv_len, std::vector<int32_t>(static_cast<size_t>(c.q_len), 1),
                      std::span<const int32_t>(perm.data() + int64_t{b} * c.kv_len, static_cast<size_t>(c.kv_len)));
    }
    const int64_t t = fb.num_tokens();
    Buffer q(be, size_t(t) * hq * d * 2), out(be, size_t(t) * hq * d * 2);
    fill_random(be, q.data(), q.bytes(), DType::kBF16, gen);
    for (DType dt : {DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2}) {
      KvCacheConfig cfg{1, hkv, d, dt, tokens + 1};
      cfg.max_requests = c.batch;
      cfg.max_context_len = c.kv_len;
      auto cache = be.create_kv_cache(cfg, KvScales::ones(1, hkv));
      const KvLayer l = cache->layer(0);
      fill_random(be, l.k.data, l.k.nbytes(), dt, gen);
      fill_random(be, l.v.data, l.v.nbytes(), dt, gen);
      const DeviceBatch db = be.upload_batch(fb, *cache);
      const Tensor tq = q.view(DType::kBF16, {t, hq, d}), to = out.view(DType::kBF16, {t, hq, d});
      const double ms = time_ms(s, 20, [&] { be.attention(tq, l, db, 0.088f, to); });
      const double bytes = static_cast<double>(tokens) * hkv * d * 2 * dtype_size(dt) + 2.0 * t * hq * d * 2;
      double flops = 0;
      for (int b = 0; b < c.batch; ++b)
        for (int i = 0; i < c.q_len; ++i) flops += 4.0 * hq * d * (c.kv_len - c.q_len + i + 1);
      std::printf("%-26s %-9s %9.3f %10.0f %8.1f %10.1f\n", c.name, std::string(dtype_name(dt)).c_str(), ms,
                  bytes / ms / 1e6, 100.0 * bytes / ms / 1e6 / copy_gbs, flops / ms / 1e9);
    }
  }
}

}  // namespace
}  // namespace serve8

int main() {
  try {
    serve8::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "backend_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
