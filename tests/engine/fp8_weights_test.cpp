// --quantization fp8 on the CPU backend: what the layers' matrices become, and how far stories260K's
// predictions move from its own fp32 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/direct_batch.h"
#include "engine/engine.h"
#include "stories_fixture.h"

namespace serve8 {
namespace {

EngineParts stories_parts(const std::string& quantization) {
  EngineArgs a = testing::stories_args("fp32");
  a.quantization = quantization;
  return create_engine_parts(a);
}

TEST(Fp8Weights, MatricesTakeOneBytePerWeightAndAScalePerRow) {
  EngineParts dense = stories_parts("");
  EngineParts fp8 = stories_parts("fp8");
  const ModelConfig& c = dense.model->config();
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  const int64_t rows = q + 2 * kv + h + 2 * inter + h;         // qkv, o, gate_up, down
  const int64_t weights = (q + 2 * kv) * h + h * q + 2 * inter * h + h * inter;
  const int64_t layers = c.num_layers;
  // fp32 matrices (4 bytes a weight) become 1 byte a weight and a 4-byte scale per row.
  EXPECT_EQ(static_cast<int64_t>(fp8.model->weight_bytes()),
            static_cast<int64_t>(dense.model->weight_bytes()) - layers * (3 * weights - 4 * rows));
  EXPECT_EQ(fp8.model->weight_dtype(), "fp8_e4m3 (per-channel scales) + fp32");
  EXPECT_EQ(dense.model->weight_dtype(), "fp32");
}

// Mean KLD (reference || test) and same top-1 count over rows of last-token logits.
std::pair<double, int> compare(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& test) {
  double kld_sum = 0.0;
  int same_top1 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::vector<float>& a = ref[i];
    const std::vector<float>& b = test[i];
    double ma = -INFINITY, mb = -INFINITY;
    size_t ta = 0, tb = 0;
    for (size_t j = 0; j < a.size(); ++j) {
      if (a[j] > ma) ma = a[j], ta = j;
      if (b[j] > mb) mb = b[j], tb = j;
    }
    double za = 0.0, zb = 0.0;
    for (size_t j = 0; j < a.size(); ++j) za += std::exp(a[j] - ma), zb += std::exp(b[j] - mb);
    for (size_t j = 0; j < a.size(); ++j) {
      const double la = a[j] - ma - std::log(za), lb = b[j] - mb - std::log(zb);
      kld_sum += std::exp(la) * (la - lb);
    }
    same_top1 += ta == tb;
  }
  return {kld_sum / static_cast<double>(ref.size()), same_top1};
}

// SmolLM2-135M-Instruct (the GGUF scripts/setup.sh fetches) on ShareGPT text: the prediction after
// each of 12 40-token prompts, FP8 weights against the same checkpoint's weights. docs/accuracy.md has the
// full measurement (eval kld); this catches a misplaced scale or a wrong row, which move it by far more.
TEST(Fp8Weights, SmolLM2PredictionsStayClose) {
  const char* env = std::getenv("SERVE8_MODELS_DIR");
  const std::filesystem::path gguf = (env && *env ? std::filesystem::path(env)
                                                   : std::filesystem::path(SERVE8_SOURCE_DIR) / ".models") /
                                     "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::is_regular_file(gguf)) GTEST_SKIP() << "no " << gguf << " (scripts/setup.sh fetches it)";
  auto parts = [&](const std::string& q) {
    EngineArgs a;
    a.model_path = gguf.string();
    a.device = "cpu";
    a.quantization = q;
    a.max_total_tokens = 8192;
    a.scheduler.max_running_requests = 32;
    return create_engine_parts(a);
  };
  EngineParts dense = parts(""), fp8 = parts("fp8");
  std::ifstream f(testing::shared_dir() + "/data/sharegpt/ShareGPT_V3_filtered_500.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t c = 0; c < j.size() && prompts.size() < 12; ++c) {
    std::vector<int32_t> ids = dense.tokenizer->encode(j[c]["conversations"][0]["value"].get<std::string>(), false);
    if (ids.size() < 40) continue;
    ids.resize(40);
    prompts.push_back(ids);
  }
  ASSERT_EQ(prompts.size(), 12u);
  const auto first = first_slots(12, 40, *dense.kv);
  const auto [kld, same] =
      compare(prefill(*dense.model, *dense.kv, prompts, first, 4096, 32, true),
              prefill(*fp8.model, *fp8.kv, prompts, first, 4096, 32, true));
  fprintf(stderr, "SmolLM2 FP8 weights: mean KLD %.4f, same top-1 %d of 12\n", kld, same);
  EXPECT_GT(kld, 1e-5) << "FP8 weights changed nothing";
  EXPECT_LT(kld, 0.1);
  EXPECT_GE(same, 9);
}

TEST(Fp8Weights, UnknownQuantizationNamesTheFlag) {
  try {
    stories_parts("int3");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--quantization"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace serve8
