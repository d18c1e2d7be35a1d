// model/weights.h: loading HF safetensors into a backend (fusing, conversion, errors naming file
// and tensor) and dummy weights, on a host-memory fake backend.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/fake_backend.h"
#include "model/llama.h"
#include "model/test_files.h"

namespace serve8 {
namespace {

using testing::error_of;
using testing::HostMemoryBackend;
using testing::TempDir;
using testing::write_raw_safetensors;

ModelConfig tiny_config(const std::string& arch = "LlamaForCausalLM") {
  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 32;
  c.max_position_embeddings = 64;
  c.attention_bias = arch == "Qwen2ForCausalLM";
  c.eos_token_ids = {2};
  return c;
}

struct Spec {
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
};

// The HF tensors of a config: name -> shape.
std::map<std::string, std::vector<int64_t>> hf_shapes(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  std::map<std::string, std::vector<int64_t>> s;
  s["model.embed_tokens.weight"] = {c.vocab_size, h};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s[p + "input_layernorm.weight"] = {h};
    s[p + "self_attn.q_proj.weight"] = {q, h};
    s[p + "self_attn.k_proj.weight"] = {kv, h};
    s[p + "self_attn.v_proj.weight"] = {kv, h};
    if (c.attention_bias) {
      s[p + "self_attn.q_proj.bias"] = {q};
      s[p + "self_attn.k_proj.bias"] = {kv};
      s[p + "self_attn.v_proj.bias"] = {kv};
    }
    s[p + "self_attn.o_proj.weight"] = {h, q};
    s[p + "post_attention_layernorm.weight"] = {h};
    s[p + "mlp.gate_proj.weight"] = {i, h};
    s[p + "mlp.up_proj.weight"] = {i, h};
    s[p + "mlp.down_proj.weight"] = {h, i};
  }
  s["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) s["lm_head.weight"] = {c.vocab_size, h};
  return s;
}

// Values exact in bf16 and distinct per tensor, so fused rows can be traced to their source.
float value_of(const std::string& name, int64_t i) {
  const size_t k = std::hash<std::string>{}(name) % 1000 + static_cast<size_t>(i) * 7;
  return static_cast<float>(static_cast<int>(k % 61) - 30) / 16.0f;
}

// A checkpoint builder that can write any dtype string and any shape, for the broken cases.
class CheckpointBuilder {
 public:
  explicit CheckpointBuilder(const ModelConfig& c, const std::string& dtype = "BF16") {
    for (const auto& [name, shape] : hf_shapes(c)) specs_[name] = {dtype, shape};
  }
  std::map<std::string, Spec>& specs() { return specs_; }

  void write(const std::string& path) const {
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto& [name, spec] : specs_) {
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      const size_t begin = data.size();
      for (int64_t i = 0; i < n; ++i) {
        const float v = value_of(name, i);
        if (spec.dtype == "F32") {
          data.append(reinterpret_cast<const char*>(&v), 4);
        } else if (spec.dtype == "I32") {
          const int32_t x = static_cast<int32_t>(v);
          data.append(reinterpret_cast<const char*>(&x), 4);
        } else {
          const uint16_t b = spec.dtype == "BF16" ? f32_to_bf16(v) : f32_to_f16(v);
          data.append(reinterpret_cast<const char*>(&b), 2);
        }
      }
      header[name] = {{"dtype", spec.dtype}, {"shape", spec.shape}, {"data_offsets", {begin, data.size()}}};
    }
    write_raw_safetensors(path, header.dump(), data);
  }

 private:
  std::map<std::string, Spec> specs_;
};

std::vector<float> to_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_elements(t.data, t.dtype, out.data(), DType::kF32, out.size());
  return out;
}

// Checks that rows [row0, row0 + rows) of a loaded tensor hold the named source tensor.
void expect_rows(const Tensor& t, int64_t row0, const std::string& name, int64_t count) {
  const std::vector<float> got = to_f32(t);
  const int64_t offset = row0 * (t.ndim == 1 ? 1 : t.shape[1]);
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(got[static_cast<size_t>(offset + i)], value_of(name, i)) << name << " element " << i;
}

TEST(LoadWeights, FusesAndConverts) {
  for (DType compute : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(compute)));
    const ModelConfig c = tiny_config();
    TempDir dir;
    CheckpointBuilder(c, "BF16").write(dir.file("model.safetensors"));
    HostMemoryBackend backend(compute);
    {
      const LlamaWeights w = load_llama_weights(c, dir.path(), backend);
      ASSERT_EQ(w.layers.size(), 2u);
      EXPECT_EQ(w.embed.dtype, compute);
      EXPECT_EQ(w.embed.shape_str(), "[32, 16]");
      const LayerWeights& l1 = w.layers[1];
      EXPECT_EQ(l1.wqkv.shape_str(), "[32, 16]");  // 16 q rows + 2 * 8 kv rows
      EXPECT_EQ(l1.w_gate_up.shape_str(), "[48, 16]");
      EXPECT_EQ(l1.w_down.shape_str(), "[16, 24]");
      EXPECT_EQ(l1.wo.shape_str(), "[16, 16]");
      EXPECT_TRUE(l1.bqkv.empty());
      const std::string p = "model.layers.1.";
      expect_rows(l1.wqkv, 0, p + "self_attn.q_proj.weight", 16 * 16);
      expect_rows(l1.wqkv, 16, p + "self_attn.k_proj.weight", 8 * 16);
      expect_rows(l1.wqkv, 24, p + "self_attn.v_proj.weight", 8 * 16);
      expect_rows(l1.w_gate_up, 0, p + "mlp.gate_proj.weight", 24 * 16);
      expect_rows(l1.w_gate_up, 24, p + "mlp.up_proj.weight", 24 * 16);
      expect_rows(l1.w_down, 0, p + "mlp.down_proj.weight", 16 * 24);
      expect_rows(l1.attn_norm, 0, p + "input_layernorm.weight", 16);
      expect_rows(l1.ffn_norm, 0, p + "post_attention_layernorm.weight", 16);
      expect_rows(w.final_norm, 0, "model.norm.weight", 16);
      expect_rows(w.lm_head, 0, "lm_head.weight", 32 * 16);
      EXPECT_NE(w.lm_head.data, w.embed.data);
      size_t total = 0;
      for (const Buffer& b : w.storage) total += b.bytes();
      EXPECT_EQ(w.bytes, total);
      EXPECT_EQ(w.bytes, static_cast<size_t>(c.num_parameters()) * dtype_size(compute));
    }
    EXPECT_EQ(backend.live_allocations, 0);
  }
}

TEST(LoadWeights, TiedEmbeddingsAndBias) {
  ModelConfig c = tiny_config("Qwen2ForCausalLM");
  c.tie_word_embeddings = true;
  TempDir dir;
  CheckpointBuilder(c, "F32").write(dir.file("model.safetensors"));
  HostMemoryBackend backend(DType::kF32);
  const LlamaWeights w = load_llama_weights(c, dir.path(), backend);
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  EXPECT_EQ(w.lm_head.shape_str(), "[32, 16]");
  const LayerWeights& l0 = w.layers[0];
  EXPECT_EQ(l0.bqkv.shape_str(), "[32]");
  expect_rows(l0.bqkv, 0, "model.layers.0.self_attn.q_proj.bias", 16);
  expect_rows(l0.bqkv, 16, "model.layers.0.self_attn.k_proj.bias", 8);
  expect_rows(l0.bqkv, 24, "model.layers.0.self_attn.v_proj.bias", 8);
  EXPECT_EQ(w.bytes, static_cast<size_t>(c.num_parameters()) * 4);
}

TEST(LoadWeights, ShardedDirectory) {
  const ModelConfig c = tiny_config();
  TempDir dir;
  CheckpointBuilder all(c, "F16");
  CheckpointBuilder first = all, second = all;
  nlohmann::json weight_map;
  for (const auto& [name, spec] : all.specs()) {
    const bool in_first = name.find("layers.1.") == std::string::npos && name != "lm_head.weight";
    (in_first ? second : first).specs().erase(name);
    weight_map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  first.write(dir.file("model-00001-of-00002.safetensors"));
  second.write(dir.file("model-00002-of-00002.safetensors"));
  std::ofstream(dir.file("model.safetensors.index.json")) << nlohmann::json{{"weight_map", weight_map}}.dump();
  HostMemoryBackend backend(DType::kF32);
  const LlamaWeights w = load_llama_weights(c, dir.path(), backend);
  expect_rows(w.layers[1].wqkv, 16, "model.layers.1.self_attn.k_proj.weight", 8 * 16);
  expect_rows(w.layers[0].w_gate_up, 24, "model.layers.0.mlp.up_proj.weight", 24 * 16);
  expect_rows(w.lm_head, 0, "lm_head.weight", 32 * 16);
}

TEST(LoadWeights, ErrorsNameFileAndTensor) {
  const ModelConfig c = tiny_config();
  HostMemoryBackend backend(DType::kBF16);
  auto load_error = [&](CheckpointBuilder& b, const std::string& file_name) {
    TempDir dir;
    b.write(dir.file(file_name));
    return error_of([&] { load_llama_weights(c, dir.path(), backend); });
  };
  auto expect_has = [](const std::string& msg, const std::vector<std::string>& parts) {
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  };

  CheckpointBuilder missing(c);
  missing.specs().erase("model.layers.1.self_attn.k_proj.weight");
  expect_has(load_error(missing, "model.safetensors"),
             {"model.safetensors", "tensor 'model.layers.1.self_attn.k_proj.weight' is missing"});

  CheckpointBuilder no_head(c);
  no_head.specs().erase("lm_head.weight");
  expect_has(load_error(no_head, "model.safetensors"), {"model.safetensors", "'lm_head.weight' is missing"});

  CheckpointBuilder shape(c);
  shape.specs()["model.layers.0.mlp.up_proj.weight"].shape = {24, 15};
  expect_has(load_error(shape, "model.safetensors"),
             {"model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' has shape [24, 15], expected [24, 16]"});

  CheckpointBuilder head_shape(c);
  head_shape.specs()["lm_head.weight"].shape = {31, 16};
  expect_has(load_error(head_shape, "model.safetensors"),
             {"model.safetensors: tensor 'lm_head.weight' has shape [31, 16], expected [32, 16]"});

  CheckpointBuilder dtype(c);
  dtype.specs()["model.norm.weight"].dtype = "I32";
  expect_has(load_error(dtype, "model.safetensors"), {"model.safetensors", "tensor 'model.norm.weight'", "I32"});

  // No model.safetensors at all: the directory is named.
  CheckpointBuilder elsewhere(c);
  expect_has(load_error(elsewhere, "weights.safetensors"), {"no model.safetensors"});

  // Truncated: the tensor stored last (map order: model.norm.weight) loses its tail.
  {
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    CheckpointBuilder(c).write(path);
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 6);
    expect_has(error_of([&] { load_llama_weights(c, dir.path(), backend); }),
               {"model.safetensors", "tensor 'model.norm.weight'", "truncated"});
  }
  // A header length past the end and a header that is not JSON.
  {
    TempDir dir;
    write_raw_safetensors(dir.file("model.safetensors"), "{\"a\": [", "");
    expect_has(error_of([&] { load_llama_weights(c, dir.path(), backend); }), {"model.safetensors", "not valid JSON"});
    std::ofstream(dir.file("model.safetensors"), std::ios::binary | std::ios::trunc) << std::string(8, '\xff') << "{}";
    expect_has(error_of([&] { load_llama_weights(c, dir.path(), backend); }), {"model.safetensors", "header length"});
  }
  EXPECT_EQ(backend.live_allocations, 0);  // nothing leaks when a load fails
}

// ---- dummy weights ----

double mean_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

double std_of(const std::vector<float>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

ModelConfig small_config() {
  ModelConfig c = tiny_config();
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 1000;
  return c;
}

TEST(DummyWeights, ShapesStatisticsAndDeterminism) {
  const ModelConfig c = small_config();
  HostMemoryBackend backend(DType::kF32);
  const LlamaWeights a = dummy_llama_weights(c, backend, 7);
  EXPECT_EQ(a.bytes, static_cast<size_t>(c.num_parameters()) * 4);
  ASSERT_EQ(a.layers.size(), 2u);
  const LayerWeights& l = a.layers[1];
  EXPECT_EQ(l.wqkv.shape_str(), "[192, 128]");
  EXPECT_EQ(l.w_gate_up.shape_str(), "[704, 128]");
  EXPECT_EQ(l.w_down.shape_str(), "[128, 352]");
  EXPECT_EQ(a.lm_head.shape_str(), "[1000, 128]");
  EXPECT_NE(a.lm_head.data, a.embed.data);

  for (const Tensor* norm : {&l.attn_norm, &l.ffn_norm, &a.final_norm}) {
    for (float x : to_f32(*norm)) {
      EXPECT_GE(x, 0.95f);
      EXPECT_LE(x, 1.05f);
    }
  }
  struct Case {
    const Tensor* t;
    int64_t fan_in;
  };
  for (const Case& k : {Case{&l.wqkv, 128}, Case{&l.wo, 128}, Case{&l.w_gate_up, 128}, Case{&l.w_down, 352},
                        Case{&a.embed, 128}, Case{&a.lm_head, 128}}) {
    const std::vector<float> v = to_f32(*k.t);
    const double want = 1.0 / std::sqrt(static_cast<double>(k.fan_in));
    EXPECT_NEAR(std_of(v), want, 0.03 * want) << k.t->shape_str();
    EXPECT_NEAR(mean_of(v), 0.0, 0.05 * want) << k.t->shape_str();
  }
  // Tensors differ from each other.
  EXPECT_NE(to_f32(a.layers[0].wo), to_f32(a.layers[1].wo));

  HostMemoryBackend backend2(DType::kF32);
  const LlamaWeights same = dummy_llama_weights(c, backend2, 7);
  const LlamaWeights other = dummy_llama_weights(c, backend2, 8);
  EXPECT_EQ(to_f32(same.layers[1].w_down), to_f32(l.w_down));
  EXPECT_EQ(to_f32(same.embed), to_f32(a.embed));
  EXPECT_NE(to_f32(other.layers[1].w_down), to_f32(l.w_down));

  // The bf16 weights are the fp32 ones rounded: generation happens in fp32 then converts.
  HostMemoryBackend bf16_backend(DType::kBF16);
  const LlamaWeights b = dummy_llama_weights(c, bf16_backend, 7);
  EXPECT_EQ(b.bytes, a.bytes / 2);
  const std::vector<float> f32 = to_f32(l.wqkv);
  const auto* bf = b.layers[1].wqkv.ptr<uint16_t>();
  for (size_t i = 0; i < f32.size(); ++i) ASSERT_EQ(bf[i], f32_to_bf16(f32[i])) << i;
}

TEST(DummyWeights, TiedAndBias) {
  ModelConfig c = small_config();
  c.architecture = "Qwen2ForCausalLM";
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  HostMemoryBackend backend(DType::kF16);
  const LlamaWeights w = dummy_llama_weights(c, backend, 1);
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  EXPECT_EQ(w.layers[0].bqkv.shape_str(), "[192]");
  EXPECT_EQ(w.bytes, static_cast<size_t>(c.num_parameters()) * 2);
}

TEST(LlamaModelFp8, WeightOnlyIsRefusedWhereTheBackendCannotMultiplyIt) {
  HostMemoryBackend backend(DType::kBF16);
  const auto build = [&](bool weight_only) {
    ModelConfig c = small_config();
    c.fp8_checkpoint = Fp8Checkpoint{"compressed-tensors", weight_only};
    LlamaWeights w = dummy_llama_weights(c, backend, 1);
    for (LayerWeights& l : w.layers) l.w_down.dtype = DType::kFP8E4M3;  // as a loaded e4m3 matrix
    LlamaModel(c, std::move(w), backend, 64, 8);
  };
  EXPECT_NO_THROW(build(false));  // inputs quantized per token: gemm_fp8, which every backend has
  const std::string e = error_of([&] { build(true); });
  EXPECT_NE(e.find("host-memory backend cannot multiply"), std::string::npos) << e;
  EXPECT_NE(e.find("--activations token"), std::string::npos) << e;
}

TEST(DummyWeights, Throughput) {
  // About 100 M parameters; prints the rate so a 13B run can be extrapolated.
  ModelConfig c = small_config();
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_layers = 6;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.vocab_size = 32000;
  HostMemoryBackend backend(DType::kBF16);
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  const LlamaWeights w = dummy_llama_weights(c, backend, 3);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const double params = static_cast<double>(c.num_parameters());
  std::printf("dummy weights: %.1f M params in %.3f s wall, %.3f s CPU (%.0f M params per CPU second)\n", params / 1e6,
              s, cpu, params / cpu / 1e6);
  EXPECT_EQ(w.bytes, static_cast<size_t>(c.num_parameters()) * 2);
}

}  // namespace
}  // namespace serve8
