// E4M3 KV scales from a --quantization-param-path JSON and from checkpoint tensors.
#include "model/kv_scales.h"

#include <gtest/gtest.h>

#include <fstream>

#include "formats/safetensors.h"
#include "test_files.h"

namespace serve8 {
namespace {

using testing::error_of;
using testing::TempDir;

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
  return dir.file(name);
}

TEST(KvScalesJson, PerLayerScalingFactorAppliesToKAndVAndEveryHead) {
  TempDir dir;
  const std::string p = write(dir, "s.json", R"({"model_type": "llama", "kv_cache": {"dtype": "float8_e4m3fn",
      "scaling_factor": {"0": {"0": 0.5, "1": 0.25}}}})");
  const KvScales s = read_kv_scales_json(p, 2, 3);
  EXPECT_EQ(s.k, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f}));
  EXPECT_EQ(s.v, s.k);
}

TEST(KvScalesJson, PerHeadKAndVTakePrecedence) {
  TempDir dir;
  const std::string p = write(dir, "s.json", R"({"kv_cache": {"dtype": "float8_e4m3fn",
      "scaling_factor": {"0": {"0": 9, "1": 9}},
      "k_scale": {"0": [0.1, 0.2], "1": [0.3, 0.4]}, "v_scale": {"0": 0.5, "1": [0.6, 0.7]}}})");
  const KvScales s = read_kv_scales_json(p, 2, 2);
  EXPECT_EQ(s.k, (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f}));
  EXPECT_EQ(s.v, (std::vector<float>{0.5f, 0.5f, 0.6f, 0.7f}));
}

TEST(KvScalesJson, MismatchesNameTheFileAndField) {
  TempDir dir;
  const struct {
    const char* json;
    const char* expect;
  } cases[] = {
      {R"({"kv_cache": {"dtype": "float8_e5m2", "scaling_factor": {"0": {"0": 1, "1": 1}}}})", "kv_cache.dtype"},
      {R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {"0": 1, "1": 1, "2": 1}}}})",
       "has 3 layers, the model has 2"},
      {R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"1": {"0": 1, "1": 1}}}})", "rank \"0\""},
      {R"({"kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {"0": {"0": 1, "1": -2}}}})", "positive"},
      {R"({"kv_cache": {"dtype": "float8_e4m3fn", "k_scale": {"0": [1, 2, 3], "1": 1}, "v_scale": {"0": 1, "1": 1}}})",
       "has 3 scales, the model has 2 KV heads"},
      {R"({"kv_cache": {"dtype": "float8_e4m3fn", "k_scale": {"0": 1, "1": 1}}})", "only one of k_scale"},
      {R"({"kv": 1})", "\"kv_cache\""},
      {R"({not json)", "not JSON"},
  };
  for (const auto& c : cases) {
    const std::string p = write(dir, "bad.json", c.json);
    const std::string msg = error_of([&] { read_kv_scales_json(p, 2, 2); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.json << " -> " << msg;
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { read_kv_scales_json(dir.file("missing.json"), 2, 2); }).find("cannot read"),
            std::string::npos);
}

TEST(KvScalesJson, WriteThenReadRoundTrips) {
  TempDir dir;
  KvScales s = KvScales::ones(2, 2);
  s.k = {0.1f, 0.2f, 0.3f, 0.4f};
  s.v = {0.5f, 0.6f, 0.7f, 0.8f};
  write_kv_scales_json(dir.file("h.json"), s, 2, 2, true, "test");
  const KvScales h = read_kv_scales_json(dir.file("h.json"), 2, 2);
  EXPECT_EQ(h.k, s.k);
  EXPECT_EQ(h.v, s.v);
  // Per layer: each layer's largest head, for K and V separately.
  write_kv_scales_json(dir.file("l.json"), s, 2, 2, false, "test");
  const KvScales l = read_kv_scales_json(dir.file("l.json"), 2, 2);
  EXPECT_EQ(l.k, (std::vector<float>{0.2f, 0.2f, 0.4f, 0.4f}));
  EXPECT_EQ(l.v, (std::vector<float>{0.6f, 0.6f, 0.8f, 0.8f}));
}

// The K/V means of int8/int4 pools: written beside the scales, read only when head_dim is given,
// and a file whose means do not fit the model is refused by field.
TEST(KvScalesJson, MeansRoundTripAndMismatchesAreNamed) {
  TempDir dir;
  KvScales s = KvScales::ones(2, 2);
  for (int i = 0; i < 2 * 2 * 3; ++i) {
    s.k_mean.push_back(0.5f * static_cast<float>(i) - 2.0f);
    s.v_mean.push_back(-0.25f * static_cast<float>(i));
  }
  write_kv_scales_json(dir.file("m.json"), s, 2, 2, true, "test");
  const KvScales m = read_kv_scales_json(dir.file("m.json"), 2, 2, 3);
  EXPECT_EQ(m.k_mean, s.k_mean);
  EXPECT_EQ(m.v_mean, s.v_mean);
  EXPECT_TRUE(read_kv_scales_json(dir.file("m.json"), 2, 2).k_mean.empty());
  const std::string msg = error_of([&] { read_kv_scales_json(dir.file("m.json"), 2, 2, 4); });
  EXPECT_NE(msg.find("kv_cache.k_mean[\"0\"][0] must hold 4 values"), std::string::npos) << msg;
  const std::string p = write(dir, "bad.json", R"({"kv_cache": {"dtype": "float8_e4m3fn",
      "scaling_factor": {"0": {"0": 1}}, "k_mean": {"0": [[1, 2]]}, "v_mean": {"0": [[1, "x"]]}}})");
  EXPECT_NE(error_of([&] { read_kv_scales_json(p, 1, 1, 2); }).find("kv_cache.v_mean[\"0\"][0][1]"), std::string::npos);
}

void write_scale_tensor(SafetensorsWriter& w, const std::string& name, std::vector<float>* values) {
  w.add(name, DType::kF32, values->size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(values->size())},
        values->data());
}

TEST(KvScalesCheckpoint, VllmAndModelOptNames) {
  TempDir dir;
  std::vector<float> k0{0.5f}, v0{0.25f}, k1{0.1f, 0.2f}, v1{0.3f, 0.4f}, w{1.0f, 2.0f};
  {
    SafetensorsWriter sw(dir.file("model.safetensors"));
    sw.add("model.embed_tokens.weight", DType::kF32, {1, 2}, w.data());
    write_scale_tensor(sw, "model.layers.0.self_attn.k_scale", &k0);
    write_scale_tensor(sw, "model.layers.0.self_attn.v_scale", &v0);
    write_scale_tensor(sw, "model.layers.1.self_attn.k_proj.output_scale", &k1);
    write_scale_tensor(sw, "model.layers.1.self_attn.v_proj.output_scale", &v1);
    sw.finish();
  }
  const std::optional<KvScales> s = read_checkpoint_kv_scales(dir.path(), 2, 2);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->k, (std::vector<float>{0.5f, 0.5f, 0.1f, 0.2f}));
  EXPECT_EQ(s->v, (std::vector<float>{0.25f, 0.25f, 0.3f, 0.4f}));
}

TEST(KvScalesCheckpoint, NoneOrSomeLayers) {
  TempDir dir;
  std::vector<float> w{1.0f, 2.0f}, k0{0.5f};
  {
    SafetensorsWriter sw(dir.file("model.safetensors"));
    sw.add("model.embed_tokens.weight", DType::kF32, {1, 2}, w.data());
    sw.finish();
  }
  EXPECT_FALSE(read_checkpoint_kv_scales(dir.path(), 2, 2).has_value());
  EXPECT_FALSE(read_checkpoint_kv_scales(dir.file("nothing-here"), 2, 2).has_value());
  TempDir partial;
  {
    SafetensorsWriter sw(partial.file("model.safetensors"));
    write_scale_tensor(sw, "model.layers.0.self_attn.k_scale", &k0);
    sw.finish();
  }
  EXPECT_NE(error_of([&] { read_checkpoint_kv_scales(partial.path(), 2, 2); }).find("for 1 of 2 layers"),
            std::string::npos);
}

}  // namespace
}  // namespace serve8
