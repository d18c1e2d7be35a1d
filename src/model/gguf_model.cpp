#include "model/gguf_model.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "formats/safetensors.h"

namespace serve8 {

namespace {

int to_int(const GgufFile& f, const std::string& key) {
  const int64_t v = f.get_int(key);
  SERVE8_CHECK(v > 0 && v < (int64_t{1} << 31), "{}: metadata '{}' = {} is out of range", f.path(), key, v);
  return static_cast<int>(v);
}

// Rows of head h, HF index j * D/2 + i, come from GGUF row i * 2 + j.
std::vector<float> unpermute_rows(const std::vector<float>& w, int heads, int head_dim, int64_t cols) {
  std::vector<float> out(w.size());
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j) {
        const int64_t src = static_cast<int64_t>(h) * head_dim + i * 2 + j;
        const int64_t dst = static_cast<int64_t>(h) * head_dim + j * half + i;
        std::memcpy(&out[static_cast<size_t>(dst * cols)], &w[static_cast<size_t>(src * cols)],
                    static_cast<size_t>(cols) * sizeof(float));
      }
  return out;
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  SERVE8_CHECK(arch == "llama" || arch == "qwen2",
               "{}: general.architecture '{}' is not one serve8 runs (llama, qwen2)", f.path(), arch);
  ModelConfig c;
  c.architecture = arch == "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM";
  const std::string a = arch + ".";
  c.hidden_size = to_int(f, a + "embedding_length");
  c.intermediate_size = to_int(f, a + "feed_forward_length");
  c.num_layers = to_int(f, a + "block_count");
  c.num_heads = to_int(f, a + "attention.head_count");
  c.num_kv_heads = f.has(a + "attention.head_count_kv") ? to_int(f, a + "attention.head_count_kv") : c.num_heads;
  c.head_dim = f.has(a + "attention.key_length") ? to_int(f, a + "attention.key_length") : c.hidden_size / c.num_heads;
  c.vocab_size = f.has(a + "vocab_size") ? to_int(f, a + "vocab_size")
                                         : static_cast<int>(f.get_array("tokenizer.ggml.tokens").size());
  c.max_position_embeddings = to_int(f, a + "context_length");
  c.rms_norm_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon"));
  c.rope_theta = f.has(a + "rope.freq_base") ? static_cast<float>(f.get_float(a + "rope.freq_base")) : 10000.0f;
  SERVE8_CHECK(!f.has(a + "rope.scaling.type") || f.get_string(a + "rope.scaling.type") == "none",
               "{}: RoPE scaling '{}' is not supported for GGUF models yet", f.path(),
               f.has(a + "rope.scaling.type") ? f.get_string(a + "rope.scaling.type") : "");
  c.tie_word_embeddings = !f.contains("output.weight");
  c.attention_bias = arch == "qwen2";
  if (f.has("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int>(f.get_int("tokenizer.ggml.bos_token_id"));
  if (f.has("tokenizer.ggml.eos_token_id"))
    c.eos_token_ids = {static_cast<int>(f.get_int("tokenizer.ggml.eos_token_id"))};
  SERVE8_CHECK(c.num_heads % c.num_kv_heads == 0 && c.head_dim % 2 == 0,
               "{}: {} heads over {} KV heads of dimension {} is not a Llama attention", f.path(), c.num_heads,
               c.num_kv_heads, c.head_dim);
  return c;
}

LlamaWeights load_gguf_weights(const ModelConfig& c, const GgufFile& f, Backend& backend, WeightQuant quant) {
  const auto start = std::chrono::steady_clock::now();
  const DType cdt = backend.compute_dtype();
  const bool permuted = c.architecture == "LlamaForCausalLM";
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  LlamaWeights w;
  // One backend tensor from GGUF tensors laid end to end; `heads` > 0 un-permutes that source.
  struct Source {
    std::string name;
    std::vector<int64_t> shape;  // HF order
    int heads = 0;
  };
  auto load = [&](Tensor* dst, const std::vector<Source>& sources) {
    int64_t rows = 0;
    for (const Source& s : sources) {
      const GgufTensor& t = f.tensor(s.name);
      std::vector<int64_t> want(s.shape.rbegin(), s.shape.rend());  // GGUF order
      SERVE8_CHECK(t.dims == want, "{}: tensor '{}' has shape {}, expected {}", f.path(), s.name, t.shape_str(), [&] {
        GgufTensor e;
        e.dims = want;
        return e.shape_str();
      }());
      rows += s.shape[0];
    }
    const int64_t cols = sources[0].shape.size() > 1 ? sources[0].shape[1] : 1;
    const int64_t n = rows * cols;
    Buffer buf(backend, static_cast<size_t>(n) * dtype_size(cdt));
    std::vector<uint8_t> staged(static_cast<size_t>(n) * dtype_size(cdt));
    int64_t at = 0;
    for (const Source& s : sources) {
      std::vector<float> v = dequantize(f, f.tensor(s.name));
      if (s.heads > 0 && permuted) v = unpermute_rows(v, s.heads, c.head_dim, cols);
      convert_elements(v.data(), DType::kF32, staged.data() + static_cast<size_t>(at) * dtype_size(cdt), cdt, v.size());
      at += static_cast<int64_t>(v.size());
    }
    backend.copy_to_device(buf.data(), staged.data(), staged.size());
    Tensor t;
    t.data = buf.data();
    t.dtype = cdt;
    if (cols == 1 && sources[0].shape.size() == 1) {
      t.shape[0] = rows;
      t.ndim = 1;
    } else {
      t.shape[0] = rows;
      t.shape[1] = cols;
      t.ndim = 2;
    }
    *dst = t;
    w.storage.push_back(std::move(buf));
    quantize_if_matrix(w, dst, quant, backend);
  };
  load(&w.embed, {{"token_embd.weight", {c.vocab_size, h}}});
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    load(&lw.attn_norm, {{p + "attn_norm.weight", {h}}});
    load(&lw.wqkv, {{p + "attn_q.weight", {q, h}, c.num_heads},
                    {p + "attn_k.weight", {kv, h}, c.num_kv_heads},
                    {p + "attn_v.weight", {kv, h}}});
    if (c.attention_bias)
      load(&lw.bqkv, {{p + "attn_q.bias", {q}}, {p + "attn_k.bias", {kv}}, {p + "attn_v.bias", {kv}}});
    load(&lw.wo, {{p + "attn_output.weight", {h, q}}});
    load(&lw.ffn_norm, {{p + "ffn_norm.weight", {h}}});
    load(&lw.w_gate_up, {{p + "ffn_gate.weight", {inter, h}}, {p + "ffn_up.weight", {inter, h}}});
    load(&lw.w_down, {{p + "ffn_down.weight", {h, inter}}});
  }
  load(&w.final_norm, {{"output_norm.weight", {h}}});
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    load(&w.lm_head, {{"output.weight", {c.vocab_size, h}}});
  }
  for (const Buffer& b : w.storage) w.bytes += b.bytes();
  spdlog::info("loaded {} tensors from {}: {:.2f} GiB of {} weights in {:.1f} s", f.tensors().size(), f.path(),
               static_cast<double>(w.bytes) / (1 << 30), weight_dtype_name(w, cdt),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return w;
}

}  // namespace serve8
