// LlamaModel: the Llama-family forward pass (Llama 2/3/3.1, Mistral, Qwen2) over a Backend.
//
// One call runs one step of a ForwardBatch (any mix of prefill/extend and decode rows) through
// every layer, writes the new tokens' K/V into the pool and returns the logits of each sequence's
// last new token.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "backend/backend.h"
#include "model/config.h"
#include "model/tp_shard.h"
#include "model/weights.h"

namespace serve8 {

class TpGroup;
struct TpPeer;

class LlamaModel {
 public:
  // max_tokens: the most new tokens one step may carry (activation buffers are sized for it once,
  // so their addresses stay fixed for CUDA graphs); max_seqs: the most sequences in a step.
  // Tensor parallel: `weights` are rank shard.rank's (shard_llama_weights) and comm its
  // communicator; without comm the model is whole.
  LlamaModel(ModelConfig config, LlamaWeights weights, Backend& backend, int max_tokens, int max_seqs,
             std::unique_ptr<Communicator> comm = nullptr, const TpShard* shard = nullptr);
  ~LlamaModel();

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return backend_; }
  size_t weight_bytes() const { return weights_.bytes; }
  std::string weight_dtype() const {
    const std::string name = weight_dtype_name(weights_, backend_.compute_dtype());
    return fp8_weight_only_ ? name + ", inputs unquantized" : name;
  }
  // What one decode step reads of the weights: all of them but an untied input embedding table, of
  // which it gathers one row per sequence (left out; counted at the mean bytes per parameter).
  double decode_weight_bytes() const;
  size_t activation_bytes() const;
  int max_tokens() const { return max_tokens_; }
  int max_seqs() const { return max_seqs_; }

  // Runs the step; returns logits [B, vocab] fp32 in backend memory, valid until the next call.
  // Rank 0 of a tensor-parallel group runs it on every rank (attach_tp_peers); the logits are
  // gathered over the vocabulary shards.
  Tensor forward(const ForwardBatch& batch, KvCache& kv);
  // After a forward without a graph: logits [n, vocab] of its token rows `rows` (n <= max_seqs),
  // from the final hidden states it left in place; prompt log probabilities come from them. The
  // forward's own logits are overwritten.
  Tensor logits_of_rows(std::span<const int32_t> rows);

  // Tensor parallelism. This rank's part of forward / logits_of_rows: every rank of the group
  // must make the same call at once (TpGroup does), kv being this rank's KV heads.
  Tensor forward_rank(const ForwardBatch& batch, KvCache& kv);
  Tensor logits_of_rows_rank(std::span<const int32_t> rows);
  // Makes this model (rank 0) drive ranks 1..N-1 from now on; it owns them.
  void attach_tp_peers(std::vector<TpPeer> peers);
  // The same for a group across processes: its steps reach the other ranks by broadcast; this
  // process's other ranks (local_peers, with their pools) are served on threads it owns.
  void attach_tp_group(std::vector<TpPeer> local_peers, int64_t num_slots, std::shared_ptr<void> keepalive);
  const TpShard& tp_shard() const { return shard_; }
  Communicator* communicator() const { return comm_.get(); }

  // CUDA graphs for decode: from now on, a step whose rows are all decode rows (q_len 1), at most
  // max_bs of them, replays a graph captured for the next bucketed batch size (graph_batch_sizes),
  // its extra rows padded onto slot 0 (reserved for them). Captures every bucket now, on `kv`,
  // the cache later steps must use. Returns the number of graphs, 0 where the backend has none.
  int enable_decode_graphs(KvCache& kv, int max_bs);
  int enable_decode_graphs_rank(KvCache& kv, int max_bs);  // this rank's alone (TpGroup runs each)
  void disable_decode_graphs();
  static std::vector<int> graph_batch_sizes(int max_bs);
  // The decode GEMM shapes the backend timed while the graphs were captured (--gemm-tuning).
  const std::vector<GemmTiming>& gemm_timings() const { return gemm_timings_; }

  // Called after each layer's kv_store with its QKV rows [T, Hq + 2 Hkv, D] in the compute dtype:
  // the last 2 Hkv heads are the new K (after RoPE) and V (calibration records their maxima).
  // Empty by default.
  using KvObserver = std::function<void(int layer, const Tensor& qkv)>;
  void set_kv_observer(KvObserver observer) { kv_observer_ = std::move(observer); }
  // Called with each layer matrix's input [T, K] in the compute dtype before its GEMM (`serve8
  // convert fp8` gathers GPTQ's statistics from them). Empty by default.
  enum class Matrix { kQkv, kO, kGateUp, kDown };
  using LinearObserver = std::function<void(int layer, Matrix matrix, const Tensor& input)>;
  void set_linear_observer(LinearObserver observer) { linear_observer_ = std::move(observer); }
  const LlamaWeights& weights() const { return weights_; }

 private:
  struct DecodeGraph {
    int batch_size = 0;
    std::unique_ptr<StepGraph> graph;
    DeviceBatch captured;  // the batch buffers the graph reads
  };
  Tensor forward_uploaded(const DeviceBatch& db, KvCache& kv);
  // A GEMM's input: x, and with FP8 weights its e4m3 rows and scales, quantized once for every GEMM
  // that reads x (by the op that made x where it can: add_rmsnorm, silu_mul).
  struct GemmInput {
    Tensor x, xq, xs;
  };
  // One decoder layer from its input (the attention norm's output); leaves the MLP's in proj_out_.
  void run_layer(int l, const DeviceBatch& db, const KvLayer& kv, const GemmInput& in);
  // The graph path of forward(); an empty Tensor when the batch does not qualify.
  Tensor forward_graph(const ForwardBatch& batch, KvCache& kv);
  void capture_graph(DecodeGraph& g, const DeviceBatch& db, KvCache& kv);
  void log_gemm_timings(const std::vector<GemmTiming>& timings) const;

  ModelConfig config_;
  LlamaWeights weights_;
  Backend& backend_;
  // This rank's heads, KV heads, MLP columns and vocabulary rows (the whole model at tp = 1).
  TpShard shard_;
  std::unique_ptr<Communicator> comm_;  // null at tp = 1
  std::unique_ptr<TpGroup> group_;      // rank 0 of a group: the peers it drives
  int max_tokens_;
  int max_seqs_;
  float softmax_scale_;
  KvObserver kv_observer_;
  LinearObserver linear_observer_;
  std::vector<DecodeGraph> graphs_;  // ascending batch sizes
  std::vector<GemmTiming> gemm_timings_;
  KvCache* graph_kv_ = nullptr;
  ForwardBatch padded_;  // the graph path's batch, padded to its bucket
  // Activations, sized for max_tokens_ rows.
  Buffer residual_, normed_, qkv_, q_, attn_out_, proj_out_, gate_up_, act_, last_hidden_, logits_, inv_freq_;
  Buffer logits_shard_;  // tensor parallel: this rank's vocabulary columns of the logits
  // FP8 weights: a GEMM's input quantized per token, and its scales (unless the checkpoint keeps
  // inputs unquantized: weight-only FP8).
  bool fp8_weight_only_ = false;
  Buffer act_q_, act_scale_;
  Buffer row_ids_;            // logits_of_rows's rows, int32 [max_seqs]
  int last_step_tokens_ = 0;  // rows of normed_ the last forward_uploaded filled
  // The FP8 rows an op writes for w's GEMM ([t, k] of act_q_), or nothing for a bf16 w and for
  // weight-only FP8.
  std::optional<Fp8Rows> fp8_rows_for(const Tensor& w, int64_t t, int64_t k);
  static GemmInput made_input(const Tensor& x, const std::optional<Fp8Rows>& rows);
  GemmInput gemm_input(const Tensor& x, const Tensor& w);
  // out = x · w^T (+ bias) in the matrix's dtype.
  void linear(const GemmInput& in, const Tensor& w, const Tensor& w_scale, const Tensor* bias, Tensor out);
  // The LM head over `last` [n, H] into the logits (gathered over the ranks when sharded).
  Tensor lm_head(const Tensor& last);
};

// Loads config.json and weights from an HF directory (or dummy weights of that config).
struct LoadOptions {
  std::string model_path;
  std::string load_format = "auto";  // auto | safetensors | dummy
  uint64_t seed = 0;                 // dummy weights
  WeightQuant quantization = WeightQuant::kNone;
};
std::unique_ptr<LlamaModel> load_llama_model(const LoadOptions& options, Backend& backend, int max_tokens,
                                             int max_seqs);
// What load_llama_model builds its model from: the config and the whole model's weights.
struct LoadedLlama {
  ModelConfig config;
  LlamaWeights weights;
};
LoadedLlama load_llama_weights_of(const LoadOptions& options, Backend& backend);

}  // namespace serve8
