// How far each KV storage dtype moves the next-token distributions of stories260K from the fp32-KV
// run. The golden paths are fed one token per step (decode), so every step's attention reads the
// quantized cache. Prints mean KLD and same-top-1 per dtype; the bounds catch a broken conversion,
// not quantization noise: head size 8 and tiny activations make this model far more sensitive to
// 2-3 mantissa bits than a real one (measured: e4m3 0.126, e5m2 0.415 mean KLD at scale 1.0).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "model/llama.h"
#include "stories_fixture.h"

namespace serve8 {
namespace {

std::vector<std::vector<float>> decode_logits(DType kv_dtype, const std::vector<int32_t>& tokens) {
  auto backend = create_backend("cpu");
  LoadOptions lo;
  lo.model_path = testing::stories_dir();
  auto model = load_llama_model(lo, *backend, 8, 1);
  const ModelConfig& mc = model->config();
  KvCacheConfig kc{mc.num_layers, mc.num_kv_heads, mc.head_dim, kv_dtype, static_cast<int64_t>(tokens.size()) + 1};
  auto kv = backend->create_kv_cache(kc, KvScales::ones(mc.num_layers, mc.num_kv_heads));
  std::vector<std::vector<float>> out;
  ForwardBatch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.clear();
    b.add_sequence(0, static_cast<int>(i + 1), std::span(&tokens[i], 1),
                   std::vector<int32_t>{static_cast<int32_t>(i + 1)});
    Tensor logits = model->forward(b, *kv);
    std::vector<float> host(static_cast<size_t>(mc.vocab_size));
    backend->copy_to_host(host.data(), logits.data, host.size() * sizeof(float));
    out.push_back(std::move(host));
  }
  return out;
}

std::vector<double> softmax(const std::vector<float>& x) {
  double m = -INFINITY;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  std::vector<double> p(x.size());
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp(x[i] - m);
  for (double& v : p) v /= s;
  return p;
}

struct Divergence {
  double mean_kld = 0;
  double same_top1 = 0;
};

Divergence compare(DType kv_dtype) {
  double kld = 0, same = 0;
  int n = 0;
  for (const auto& c : testing::golden_cases()) {
    std::vector<int32_t> tokens = c.prompt;
    tokens.insert(tokens.end(), c.greedy.begin(), c.greedy.end());
    const auto ref = decode_logits(DType::kF32, tokens);
    const auto got = decode_logits(kv_dtype, tokens);
    for (size_t i = 0; i < ref.size(); ++i) {
      const auto p = softmax(ref[i]);
      const auto q = softmax(got[i]);
      double k = 0;
      for (size_t v = 0; v < p.size(); ++v)
        if (p[v] > 0) k += p[v] * (std::log(p[v]) - std::log(std::max(q[v], 1e-300)));
      kld += k;
      const auto a = std::max_element(ref[i].begin(), ref[i].end()) - ref[i].begin();
      const auto b = std::max_element(got[i].begin(), got[i].end()) - got[i].begin();
      same += a == b;
      ++n;
    }
  }
  return {kld / n, same / n};
}

void check(DType t, double max_kld, double min_same) {
  const Divergence d = compare(t);
  std::printf("stories260K decode, KV %s vs fp32: mean KLD %.3g, same top-1 %.2f%%\n",
              std::string(dtype_name(t)).c_str(), d.mean_kld, 100 * d.same_top1);
  ::testing::Test::RecordProperty(std::string(dtype_name(t)) + "_mean_kld", std::to_string(d.mean_kld));
  ::testing::Test::RecordProperty(std::string(dtype_name(t)) + "_same_top1", std::to_string(d.same_top1));
  EXPECT_LT(d.mean_kld, max_kld);
  EXPECT_GE(d.same_top1, min_same);
  EXPECT_GT(d.mean_kld, 0.0) << "a quantized cache that changes nothing did not quantize";
}

TEST(KvDtypeAccuracy, Bf16) { check(DType::kBF16, 1e-3, 0.97); }
TEST(KvDtypeAccuracy, Fp16) { check(DType::kF16, 1e-4, 0.99); }
TEST(KvDtypeAccuracy, Fp8E4M3) { check(DType::kFP8E4M3, 0.3, 0.70); }
TEST(KvDtypeAccuracy, Fp8E5M2) { check(DType::kFP8E5M2, 0.8, 0.55); }
// int8 (rotated, a scale per token and head): measured 0.0025 and 97.3% (fp8_e4m3: 0.126 and 81%).
TEST(KvDtypeAccuracy, Int8) { check(DType::kI8, 0.01, 0.95); }
// int4 (rotated, 16 codes between a minimum and maximum per token and head, no means): measured
// 0.259 and 70.5% on these 8-wide heads (fp8_e5m2 at twice the bytes: 0.415).
TEST(KvDtypeAccuracy, Int4) { check(DType::kI4, 0.5, 0.6); }

}  // namespace
}  // namespace serve8
