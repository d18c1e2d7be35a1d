// LlamaModel: the Llama-family forward pass (Llama 2/3/3.1, Mistral, Qwen2) over a Backend.
//
// One call runs one step of a ForwardBatch (any mix of prefill/extend and decode rows) through
// every layer, writes the new tokens' K/V into the pool and returns the logits of each sequence's
// last new token.
#pragma once

#include <functional>
#include <memory>

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace serve8 {

class LlamaModel {
 public:
  // max_tokens: the most new tokens one step may carry (activation buffers are sized for it once,
  // so their addresses stay fixed for CUDA graphs); max_seqs: the most sequences in a step.
  LlamaModel(ModelConfig config, LlamaWeights weights, Backend& backend, int max_tokens, int max_seqs);

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return backend_; }
  size_t weight_bytes() const { return weights_.bytes; }
  size_t activation_bytes() const;
  int max_tokens() const { return max_tokens_; }
  int max_seqs() const { return max_seqs_; }

  // Runs the step; returns logits [B, vocab] fp32 in backend memory, valid until the next call.
  Tensor forward(const ForwardBatch& batch, KvCache& kv);

  // Called after each layer's kv_store with the layer's new K (after RoPE) and V, [T, Hkv, D] in
  // the compute dtype (calibration records their maxima). Empty by default.
  using KvObserver = std::function<void(int layer, const Tensor& k, const Tensor& v)>;
  void set_kv_observer(KvObserver observer) { kv_observer_ = std::move(observer); }

 private:
  void run_layer(int l, const DeviceBatch& db, const KvLayer& kv, int t);

  ModelConfig config_;
  LlamaWeights weights_;
  Backend& backend_;
  int max_tokens_;
  int max_seqs_;
  float softmax_scale_;
  KvObserver kv_observer_;
  // Activations, sized for max_tokens_ rows.
  Buffer residual_, normed_, q_, k_, v_, attn_out_, proj_out_, gate_up_, act_, last_hidden_, logits_, inv_freq_;
};

// Loads config.json and weights from an HF directory (or dummy weights of that config).
struct LoadOptions {
  std::string model_path;
  std::string load_format = "auto";  // auto | safetensors | dummy
  uint64_t seed = 0;                 // dummy weights
};
std::unique_ptr<LlamaModel> load_llama_model(const LoadOptions& options, Backend& backend, int max_tokens,
                                             int max_seqs);

}  // namespace serve8
