// model/config.h: HF config.json parsing, validation, RoPE frequencies and writing.
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/test_files.h"

namespace serve8 {
namespace {

using testing::error_of;

std::string shared_config(const std::string& name) { return std::string(SERVE8_SHARED_DIR) + "/configs/" + name; }

TEST(ModelConfig, AllSharedConfigsParse) {
  for (const char* name : {"llama-2-7b.json", "llama-2-13b.json", "llama-2-70b.json", "llama-3-8b.json",
                           "llama-3.1-8b.json", "mistral-7b-v0.1.json", "qwen2.5-7b.json"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = load_model_config(shared_config(name));
    EXPECT_GT(c.num_layers, 0);
    EXPECT_EQ(c.num_heads % c.num_kv_heads, 0);
    EXPECT_EQ(c.head_dim * c.num_heads, c.hidden_size);
    EXPECT_EQ(c.torch_dtype, DType::kBF16);
    EXPECT_FALSE(c.eos_token_ids.empty());
  }
}

TEST(ModelConfig, Llama2_7bFields) {
  const ModelConfig c = load_model_config(shared_config("llama-2-7b.json"));
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 11008);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "");
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  // Llama-2-7B has 6.74 B parameters.
  EXPECT_NEAR(static_cast<double>(c.num_parameters()), 6.738e9, 0.01e9);
}

TEST(ModelConfig, Llama2_70bIsGqa) {
  const ModelConfig c = load_model_config(shared_config("llama-2-70b.json"));
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.group_size(), 8);
  EXPECT_EQ(c.kv_size(), 1024);
}

TEST(ModelConfig, Qwen2AlwaysHasAttentionBias) {
  const ModelConfig c = load_model_config(shared_config("qwen2.5-7b.json"));
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.vocab_size, 152064);
}

TEST(ModelConfig, MistralParses) {
  const ModelConfig c = load_model_config(shared_config("mistral-7b-v0.1.json"));
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.intermediate_size, 14336);
}

TEST(ModelConfig, Llama31RopeScaling) {
  const ModelConfig c = load_model_config(shared_config("llama-3.1-8b.json"));
  ASSERT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});

  const std::vector<float> inv = c.rope_inv_freq();
  ASSERT_EQ(inv.size(), 64u);
  // The rule written out again, from Meta's description of Llama 3.1's scaling: wavelengths
  // shorter than old_context / high_freq_factor keep their frequency, longer than
  // old_context / low_freq_factor are divided by the factor, in between a linear blend in
  // old_context / wavelength.
  const double pi = std::acos(-1.0);
  int kept = 0, scaled = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = 1.0 / std::pow(500000.0, (2.0 * i) / 128.0);
    const double wavelen = 2.0 * pi / base;
    double expect;
    if (wavelen < 8192.0 / 4.0) {
      expect = base;
      ++kept;
    } else if (wavelen > 8192.0 / 1.0) {
      expect = base / 8.0;
      ++scaled;
    } else {
      const double s = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      expect = (1.0 - s) * base / 8.0 + s * base;
      ++blended;
    }
    EXPECT_NEAR(inv[static_cast<size_t>(i)], expect, 1e-6 * expect) << "i=" << i;
  }
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(blended, 6);
  EXPECT_EQ(scaled, 29);
  // Values printed by a Python transcription of transformers' _compute_llama3_parameters.
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[30], 0.00137189357f, 1e-11);
  EXPECT_NEAR(inv[35], 9.55621235e-05f, 1e-12);
  EXPECT_NEAR(inv[63], 3.06892599e-07f, 1e-14);
}

TEST(ModelConfig, UnscaledInvFreq) {
  const ModelConfig c = load_model_config(shared_config("llama-3-8b.json"));
  const std::vector<float> inv = c.rope_inv_freq();
  ASSERT_EQ(inv.size(), 64u);
  for (int i = 0; i < 64; ++i)
    EXPECT_NEAR(inv[static_cast<size_t>(i)], std::pow(c.rope_theta, -2.0 * i / 128.0),
                1e-6 * inv[static_cast<size_t>(i)]);
}

constexpr const char* kMinimal = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
  "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 512,
  "max_position_embeddings": 256, "eos_token_id": [2, 7], "dtype": "float16", "bos_token_id": null})";

TEST(ModelConfig, DefaultsAndVariants) {
  const ModelConfig c = parse_model_config(kMinimal, "mini.json");
  EXPECT_EQ(c.num_kv_heads, 8);  // defaults to heads
  EXPECT_EQ(c.head_dim, 8);      // hidden / heads
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 7}));
  EXPECT_EQ(c.torch_dtype, DType::kF16);  // the newer "dtype" key
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_FALSE(c.tie_word_embeddings);
}

std::string with(const std::string& key_value) {
  std::string s = kMinimal;
  return s.substr(0, s.size() - 1) + ", " + key_value + "}";
}

TEST(ModelConfig, ErrorsNameFileAndField) {
  std::string msg = error_of([] { parse_model_config("{not json", "bad.json"); });
  EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;

  msg = error_of(
      [] { parse_model_config(R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 8})", "gpt2/config.json"); });
  EXPECT_NE(msg.find("gpt2/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GPT2LMHeadModel"), std::string::npos) << msg;

  msg = error_of([] { parse_model_config(with(R"("num_key_value_heads": 3)"), "x/config.json"); });
  EXPECT_NE(msg.find("x/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_key_value_heads"), std::string::npos) << msg;

  msg = error_of([] { parse_model_config(with(R"("rope_scaling": {"type": "yarn", "factor": 4.0})"), "y.json"); });
  EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;

  msg = error_of([] { parse_model_config(with(R"("rms_norm_eps": "small")"), "z.json"); });
  EXPECT_NE(msg.find("rms_norm_eps"), std::string::npos) << msg;

  std::string no_vocab = kMinimal;
  no_vocab.replace(no_vocab.find("\"vocab_size\": 512,"), 18, "");
  msg = error_of([&] { parse_model_config(no_vocab, "v.json"); });
  EXPECT_NE(msg.find("vocab_size"), std::string::npos) << msg;

  msg = error_of([] { parse_model_config(with(R"("torch_dtype": "int8")"), "d.json"); });
  EXPECT_NE(msg.find("torch_dtype"), std::string::npos) << msg;

  msg = error_of([] { load_model_config("/nonexistent/dir"); });
  EXPECT_NE(msg.find("/nonexistent/dir"), std::string::npos) << msg;
}

TEST(ModelConfig, DefaultRopeTypeMeansNone) {
  const ModelConfig c = parse_model_config(with(R"("rope_scaling": {"rope_type": "default"})"), "m.json");
  EXPECT_EQ(c.rope_scaling.type, "");
}

// transformers 5 writes "rope_parameters" (theta and scaling in one object) instead of
// "rope_theta" and "rope_scaling"; a Llama-3 saved by it must not fall back to theta 10000.
TEST(ModelConfig, Transformers5RopeParameters) {
  ModelConfig c =
      parse_model_config(with(R"("rope_parameters": {"rope_type": "default", "rope_theta": 500000.0})"), "v5.json");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "");
  c = parse_model_config(with(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                         "v5.json");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(ModelConfig, JsonRoundTrip) {
  for (const char* name : {"llama-3.1-8b.json", "qwen2.5-7b.json", "llama-2-13b.json"}) {
    SCOPED_TRACE(name);
    const ModelConfig a = load_model_config(shared_config(name));
    const std::string text = model_config_to_json(a);
    const ModelConfig b = parse_model_config(text, "written");
    EXPECT_EQ(a.architecture, b.architecture);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.intermediate_size, b.intermediate_size);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.num_heads, b.num_heads);
    EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
    EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
    EXPECT_EQ(a.bos_token_id, b.bos_token_id);
    EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
    EXPECT_EQ(a.torch_dtype, b.torch_dtype);
    EXPECT_EQ(a.rope_inv_freq(), b.rope_inv_freq());
  }
  // Floats are written in their shortest form, as transformers would write them.
  const std::string text = model_config_to_json(load_model_config(shared_config("llama-2-7b.json")));
  EXPECT_NE(text.find("\"rms_norm_eps\": 1e-05"), std::string::npos) << text;
  EXPECT_NE(text.find("\"model_type\": \"llama\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"torch_dtype\": \"bfloat16\""), std::string::npos) << text;
}

}  // namespace
}  // namespace serve8
