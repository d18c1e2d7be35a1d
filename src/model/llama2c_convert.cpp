#include "model/llama2c_convert.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"
#include "model/config.h"

namespace serve8 {

void convert_llama2c(const std::string& checkpoint, const std::string& output_dir, const std::string& tokenizer_model) {
  namespace fs = std::filesystem;
  const Llama2cCheckpoint file(checkpoint);
  const Llama2cHeader& h = file.header();
  SERVE8_CHECK(tokenizer_model.empty() || fs::is_regular_file(tokenizer_model), "{}: no such tokenizer file",
               tokenizer_model);
  fs::create_directories(output_dir);

  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.head_size();
  c.vocab_size = h.vocab_size;
  c.max_position_embeddings = h.seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = h.shared_classifier;
  c.attention_bias = false;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.torch_dtype = DType::kF32;

  // Walk the arrays in file order.
  const float* p = file.weights();
  auto take = [&p](uint64_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  const int64_t d = h.dim, hid = h.hidden_dim, kv = h.kv_dim(), v = h.vocab_size, nl = h.n_layers;
  const float* embed = take(static_cast<uint64_t>(v * d));
  const float* rms_att = take(static_cast<uint64_t>(nl * d));
  const float* wq = take(static_cast<uint64_t>(nl * d * d));
  const float* wk = take(static_cast<uint64_t>(nl * kv * d));
  const float* wv = take(static_cast<uint64_t>(nl * kv * d));
  const float* wo = take(static_cast<uint64_t>(nl * d * d));
  const float* rms_ffn = take(static_cast<uint64_t>(nl * d));
  const float* w1 = take(static_cast<uint64_t>(nl * hid * d));
  const float* w2 = take(static_cast<uint64_t>(nl * d * hid));
  const float* w3 = take(static_cast<uint64_t>(nl * hid * d));
  const float* rms_final = take(static_cast<uint64_t>(d));
  take(static_cast<uint64_t>(h.seq_len) * static_cast<uint64_t>(h.head_size()));  // the RoPE tables, unused
  const float* classifier = h.shared_classifier ? nullptr : take(static_cast<uint64_t>(v * d));

  // Rows of one projection [heads * head_size, d], reordered head by head for rotate-half RoPE.
  const int hs = h.head_size();
  auto permuted = [d, hs](const float* src, int64_t heads) {
    return [src, heads, d, hs](void* dst) {
      auto* out = static_cast<float*>(dst);
      for (int64_t head = 0; head < heads; ++head)
        for (int j = 0; j < hs; ++j)
          std::memcpy(out + (head * hs + j) * d, src + (head * hs + llama2c_rope_row(j, hs)) * d,
                      static_cast<size_t>(d) * sizeof(float));
    };
  };

  const std::string st_path = (fs::path(output_dir) / "model.safetensors").string();
  SafetensorsWriter writer(st_path);
  const DType f32 = DType::kF32;
  writer.add("model.embed_tokens.weight", f32, {v, d}, embed);
  for (int64_t l = 0; l < nl; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    writer.add(pre + "input_layernorm.weight", f32, {d}, rms_att + l * d);
    writer.add(pre + "self_attn.q_proj.weight", f32, {d, d}, permuted(wq + l * d * d, h.n_heads));
    writer.add(pre + "self_attn.k_proj.weight", f32, {kv, d}, permuted(wk + l * kv * d, h.n_kv_heads));
    writer.add(pre + "self_attn.v_proj.weight", f32, {kv, d}, wv + l * kv * d);
    writer.add(pre + "self_attn.o_proj.weight", f32, {d, d}, wo + l * d * d);
    writer.add(pre + "post_attention_layernorm.weight", f32, {d}, rms_ffn + l * d);
    writer.add(pre + "mlp.gate_proj.weight", f32, {hid, d}, w1 + l * hid * d);
    writer.add(pre + "mlp.down_proj.weight", f32, {d, hid}, w2 + l * d * hid);
    writer.add(pre + "mlp.up_proj.weight", f32, {hid, d}, w3 + l * hid * d);
  }
  writer.add("model.norm.weight", f32, {d}, rms_final);
  if (classifier) writer.add("lm_head.weight", f32, {v, d}, classifier);
  writer.set_metadata("source", "llama2.c legacy checkpoint converted by serve8");
  writer.finish();

  const fs::path config_path = fs::path(output_dir) / "config.json";
  std::ofstream out(config_path, std::ios::binary | std::ios::trunc);
  out << model_config_to_json(c);
  out.close();
  SERVE8_CHECK(out.good(), "{}: write failed", config_path.string());

  if (!tokenizer_model.empty())
    fs::copy_file(tokenizer_model, fs::path(output_dir) / "tokenizer.model", fs::copy_options::overwrite_existing);
  spdlog::info("converted {} ({} layers, dim {}, vocab {}) to {}", checkpoint, h.n_layers, h.dim, h.vocab_size,
               output_dir);
}

}  // namespace serve8
