// formats/llama2c.h and model/llama2c_convert.h: converting llama2.c's stories260K to an HF directory, the q/k row permutation
// between interleaved and rotate-half RoPE, and header validation.
#include "formats/llama2c.h"
#include "model/llama2c_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/config.h"
#include "model/fake_backend.h"
#include "formats/safetensors.h"
#include "model/test_files.h"
#include "model/weights.h"

namespace serve8 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

const std::string kStories = std::string(SERVE8_SHARED_DIR) + "/models/stories260K/stories260K.bin";
const std::string kTokenizer = std::string(SERVE8_SHARED_DIR) + "/models/llama2-tokenizer/tokenizer.model";

// The raw checkpoint as floats after the 7-int header.
std::vector<float> read_bin_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const size_t bytes = static_cast<size_t>(in.tellg());
  in.seekg(28);
  std::vector<float> v((bytes - 28) / 4);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// y = W x for a row-major W [rows, cols].
std::vector<double> matvec(const float* w, int rows, int cols, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) y[static_cast<size_t>(r)] += w[r * cols + c] * x[static_cast<size_t>(c)];
  return y;
}

// llama2.c's RoPE (run.c): pairs (2i, 2i+1) of each head rotate by pos * 10000^(-2i/hs).
void rope_interleaved(std::vector<double>& v, int heads, int hs, int pos) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hs; i += 2) {
      const double angle = pos * std::pow(10000.0, -static_cast<double>(i) / hs);
      double& a = v[static_cast<size_t>(h * hs + i)];
      double& b = v[static_cast<size_t>(h * hs + i + 1)];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = a0 * std::sin(angle) + b0 * std::cos(angle);
    }
}

// HF's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, pairs (i, i + hs/2), with the
// frequencies the model config gives the backend.
void rope_half(std::vector<double>& v, int heads, int hs, int pos, const std::vector<float>& inv_freq) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hs / 2; ++i) {
      const double angle = pos * static_cast<double>(inv_freq[static_cast<size_t>(i)]);
      double& a = v[static_cast<size_t>(h * hs + i)];
      double& b = v[static_cast<size_t>(h * hs + i + hs / 2)];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = b0 * std::cos(angle) + a0 * std::sin(angle);
    }
}

TEST(Llama2c, HeaderOfStories260K) {
  const Llama2cHeader h = read_llama2c_header(kStories);
  EXPECT_EQ(h.dim, 64);
  EXPECT_EQ(h.hidden_dim, 172);
  EXPECT_EQ(h.n_layers, 5);
  EXPECT_EQ(h.n_heads, 8);
  EXPECT_EQ(h.n_kv_heads, 4);
  EXPECT_EQ(h.vocab_size, 512);
  EXPECT_EQ(h.seq_len, 512);
  EXPECT_TRUE(h.shared_classifier);
  EXPECT_EQ(h.head_size(), 8);
  EXPECT_EQ(h.file_bytes(), fs::file_size(kStories));
}

TEST(Llama2c, RopeRowOrder) {
  std::vector<int> rows;
  for (int j = 0; j < 8; ++j) rows.push_back(llama2c_rope_row(j, 8));
  EXPECT_EQ(rows, (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
}

class Stories260K : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    convert_llama2c(kStories, dir_->path(), kTokenizer);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
};
TempDir* Stories260K::dir_ = nullptr;

TEST_F(Stories260K, Config) {
  const ModelConfig c = load_model_config(dir_->path());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_TRUE(fs::exists(dir_->file("tokenizer.model")));
  EXPECT_EQ(fs::file_size(dir_->file("tokenizer.model")), fs::file_size(kTokenizer));
}

TEST_F(Stories260K, TensorsMatchTheCheckpoint) {
  const std::vector<float> bin = read_bin_floats(kStories);
  SafetensorsFile st(dir_->file("model.safetensors"));
  EXPECT_FALSE(st.contains("lm_head.weight"));  // shared classifier: tied
  // 1 embedding + 9 per layer + final norm.
  EXPECT_EQ(st.tensors().size(), 1u + 9u * 5u + 1u);
  const std::vector<float> embed = st.read_f32("model.embed_tokens.weight");
  EXPECT_EQ(st.tensor("model.embed_tokens.weight").dtype, "F32");
  EXPECT_TRUE(std::equal(embed.begin(), embed.end(), bin.begin()));
  // Offsets in the .bin, in llama2.c's order.
  const size_t d = 64, hid = 172, kv = 32, v = 512, l = 5;
  const size_t rms_att = v * d, wq = rms_att + l * d, wk = wq + l * d * d, wv = wk + l * kv * d, wo = wv + l * kv * d,
               rms_ffn = wo + l * d * d, w1 = rms_ffn + l * d, w2 = w1 + l * hid * d, w3 = w2 + l * d * hid,
               rms_final = w3 + l * hid * d;
  auto same = [&](const std::string& name, size_t offset) {
    const std::vector<float> t = st.read_f32(name);
    EXPECT_TRUE(std::equal(t.begin(), t.end(), bin.begin() + static_cast<std::ptrdiff_t>(offset))) << name;
  };
  same("model.layers.3.input_layernorm.weight", rms_att + 3 * d);
  same("model.layers.3.self_attn.v_proj.weight", wv + 3 * kv * d);
  same("model.layers.3.self_attn.o_proj.weight", wo + 3 * d * d);
  same("model.layers.3.post_attention_layernorm.weight", rms_ffn + 3 * d);
  same("model.layers.3.mlp.gate_proj.weight", w1 + 3 * hid * d);
  same("model.layers.3.mlp.down_proj.weight", w2 + 3 * d * hid);
  same("model.layers.3.mlp.up_proj.weight", w3 + 3 * hid * d);
  same("model.norm.weight", rms_final);
  // q/k are the same rows in another order: the permutation must not lose or repeat any.
  std::vector<float> q = st.read_f32("model.layers.2.self_attn.q_proj.weight");
  std::vector<float> q_orig(bin.begin() + static_cast<std::ptrdiff_t>(wq + 2 * d * d),
                            bin.begin() + static_cast<std::ptrdiff_t>(wq + 3 * d * d));
  EXPECT_NE(q, q_orig);
  std::sort(q.begin(), q.end());
  std::sort(q_orig.begin(), q_orig.end());
  EXPECT_EQ(q, q_orig);
}

// The check that matters: rotate-half RoPE on the permuted rows gives the same attention scores
// as llama2.c's interleaved RoPE on the original rows, for every query head against its KV head.
TEST_F(Stories260K, PermutedRowsGiveTheSameRotaryScores) {
  const std::vector<float> bin = read_bin_floats(kStories);
  const ModelConfig c = load_model_config(dir_->path());
  const std::vector<float> inv_freq = c.rope_inv_freq();
  SafetensorsFile st(dir_->file("model.safetensors"));
  const int d = 64, kv = 32, hs = 8, heads = 8, kv_heads = 4, v = 512, l = 5;
  std::mt19937 rng(1234);
  std::normal_distribution<double> normal;
  for (int layer : {0, 4}) {
    const float* wq = bin.data() + v * d + l * d + layer * d * d;
    const float* wk = bin.data() + v * d + l * d + l * d * d + layer * kv * d;
    const std::string pre = "model.layers." + std::to_string(layer) + ".self_attn.";
    const std::vector<float> wq_hf = st.read_f32(pre + "q_proj.weight");
    const std::vector<float> wk_hf = st.read_f32(pre + "k_proj.weight");
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<double> xq(d), xk(d);
      for (double& e : xq) e = normal(rng);
      for (double& e : xk) e = normal(rng);
      const int pos_q = 17 + 101 * trial, pos_k = 3 + 37 * trial;
      std::vector<double> q = matvec(wq, d, d, xq), k = matvec(wk, kv, d, xk);
      std::vector<double> q_hf = matvec(wq_hf.data(), d, d, xq), k_hf = matvec(wk_hf.data(), kv, d, xk);
      rope_interleaved(q, heads, hs, pos_q);
      rope_interleaved(k, kv_heads, hs, pos_k);
      rope_half(q_hf, heads, hs, pos_q, inv_freq);
      rope_half(k_hf, kv_heads, hs, pos_k, inv_freq);
      for (int h = 0; h < heads; ++h) {
        // Element by element: HF's element j of a head is llama2.c's element llama2c_rope_row(j).
        for (int j = 0; j < hs; ++j)
          EXPECT_NEAR(q_hf[static_cast<size_t>(h * hs + j)], q[static_cast<size_t>(h * hs + llama2c_rope_row(j, hs))],
                      1e-5);
        const int g = h / (heads / kv_heads);
        double s = 0, s_hf = 0;
        for (int j = 0; j < hs; ++j) {
          s += q[static_cast<size_t>(h * hs + j)] * k[static_cast<size_t>(g * hs + j)];
          s_hf += q_hf[static_cast<size_t>(h * hs + j)] * k_hf[static_cast<size_t>(g * hs + j)];
        }
        EXPECT_NEAR(s_hf, s, 1e-5 * (1.0 + std::fabs(s))) << "layer " << layer << " head " << h;
      }
    }
  }
}

TEST_F(Stories260K, LoadsAsLlamaWeights) {
  const ModelConfig c = load_model_config(dir_->path());
  testing::HostMemoryBackend backend(DType::kF32);
  const LlamaWeights w = load_llama_weights(c, dir_->path(), backend);
  EXPECT_EQ(w.layers.size(), 5u);
  EXPECT_EQ(w.layers[0].wqkv.shape_str(), "[128, 64]");
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  EXPECT_EQ(w.bytes, static_cast<size_t>(c.num_parameters()) * 4);
}

TEST(Llama2c, RejectsBadCheckpoints) {
  TempDir dir;
  // Truncated: one float short.
  const std::string cut = dir.file("cut.bin");
  fs::copy_file(kStories, cut);
  fs::resize_file(cut, fs::file_size(cut) - 4);
  std::string msg = error_of([&] { convert_llama2c(cut, dir.file("out"), ""); });
  EXPECT_NE(msg.find("cut.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("implies a file of"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir.file("out/model.safetensors")));

  // vocab_size negated: a classifier should follow, and it does not.
  const std::string unshared = dir.file("unshared.bin");
  fs::copy_file(kStories, unshared);
  {
    std::fstream f(unshared, std::ios::in | std::ios::out | std::ios::binary);
    const int32_t neg = -512;
    f.seekp(5 * 4);
    f.write(reinterpret_cast<const char*>(&neg), 4);
  }
  msg = error_of([&] { read_llama2c_header(unshared); });
  EXPECT_NE(msg.find("separate classifier"), std::string::npos) << msg;

  const std::string tiny = dir.file("tiny.bin");
  std::ofstream(tiny, std::ios::binary) << "abc";
  msg = error_of([&] { read_llama2c_header(tiny); });
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;

  msg = error_of([&] { convert_llama2c(kStories, dir.file("out2"), dir.file("no-such-tokenizer.model")); });
  EXPECT_NE(msg.find("no-such-tokenizer.model"), std::string::npos) << msg;
}

TEST(Llama2c, SeparateClassifierBecomesLmHead) {
  // Build a checkpoint with a separate classifier: stories260K's weights plus a classifier.
  TempDir dir;
  const std::string path = dir.file("cls.bin");
  fs::copy_file(kStories, path);
  std::vector<float> cls(512 * 64);
  for (size_t i = 0; i < cls.size(); ++i) cls[i] = static_cast<float>(i % 97) / 97.0f;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const int32_t neg = -512;
    f.seekp(5 * 4);
    f.write(reinterpret_cast<const char*>(&neg), 4);
    f.seekp(0, std::ios::end);
    f.write(reinterpret_cast<const char*>(cls.data()), static_cast<std::streamsize>(cls.size() * 4));
  }
  convert_llama2c(path, dir.file("out"), "");
  const ModelConfig c = load_model_config(dir.file("out"));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(fs::exists(dir.file("out/tokenizer.model")));
  SafetensorsFile st(dir.file("out/model.safetensors"));
  EXPECT_EQ(st.read_f32("lm_head.weight"), cls);
}

}  // namespace
}  // namespace serve8
