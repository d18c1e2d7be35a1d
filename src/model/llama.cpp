#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "model/builtin_models.h"
#include "model/gguf_model.h"
#include "model/tp_group.h"

namespace serve8 {

namespace {

Buffer make_buffer(Backend& backend, DType t, int64_t rows, int64_t cols) {
  return Buffer(backend, static_cast<size_t>(rows * cols) * dtype_size(t));
}

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, LlamaWeights weights, Backend& backend, int max_tokens, int max_seqs,
                       std::unique_ptr<Communicator> comm, const TpShard* shard)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      backend_(backend),
      shard_(shard ? *shard : serve8::tp_shard(config_, 0, 1)),
      comm_(std::move(comm)),
      max_tokens_(max_tokens),
      max_seqs_(max_seqs),
      softmax_scale_(1.0f / std::sqrt(static_cast<float>(config_.head_dim))) {
  SERVE8_CHECK(max_tokens > 0 && max_seqs > 0 && max_seqs <= max_tokens,
               "model: max_tokens {} and max_seqs {} must be positive with max_seqs <= max_tokens", max_tokens,
               max_seqs);
  SERVE8_CHECK((comm_ == nullptr) == (shard == nullptr) &&
                   (!comm_ || (comm_->rank() == shard_.rank && comm_->size() == shard_.size)),
               "model: tensor-parallel rank {} of {} needs its shard and its communicator", shard_.rank, shard_.size);
  if (comm_) comm_->bind(backend);
  const DType c = backend.compute_dtype();
  const int64_t h = config_.hidden_size, d = config_.head_dim;
  residual_ = make_buffer(backend, c, max_tokens, h);
  normed_ = make_buffer(backend, c, max_tokens, h);
  qkv_ = make_buffer(backend, c, max_tokens, shard_.q_size(config_.head_dim) + 2ll * shard_.kv_size(config_.head_dim));
  q_ = make_buffer(backend, c, max_tokens, shard_.num_heads * d);
  attn_out_ = make_buffer(backend, c, max_tokens, shard_.num_heads * d);
  proj_out_ = make_buffer(backend, c, max_tokens, h);
  gate_up_ = make_buffer(backend, c, max_tokens, 2ll * shard_.intermediate_size);
  act_ = make_buffer(backend, c, max_tokens, shard_.intermediate_size);
  last_hidden_ = make_buffer(backend, c, max_seqs, h);
  logits_ = make_buffer(backend, DType::kF32, max_seqs, config_.vocab_size);
  if (comm_) logits_shard_ = make_buffer(backend, DType::kF32, max_seqs, shard_.vocab_size);
  row_ids_ = make_buffer(backend, DType::kI32, max_seqs, 1);
  const bool fp8 =
      std::any_of(weights_.layers.begin(), weights_.layers.end(), [](const LayerWeights& l) { return l.any_fp8(); });
  fp8_weight_only_ = fp8 && config_.fp8_checkpoint.weight_only;
  SERVE8_CHECK(!fp8_weight_only_ || backend.has_gemm_fp8_weights(),
               "model: this checkpoint's FP8 weights take unquantized inputs (compressed-tensors without "
               "input_activations), which the {} backend cannot multiply yet; use one whose inputs are quantized "
               "per token (serve8 convert fp8 --activations token, from the unquantized checkpoint) or load the "
               "unquantized checkpoint with --quantization fp8",
               backend.name());
  if (fp8 && !fp8_weight_only_) {
    const int64_t widest = std::max<int64_t>({h, shard_.q_size(config_.head_dim), shard_.intermediate_size});
    act_q_ = make_buffer(backend, DType::kFP8E4M3, max_tokens, widest);
    act_scale_ = make_buffer(backend, DType::kF32, max_tokens, 1);
  }
  StepLimits limits{max_tokens, max_seqs, shard_.num_heads, shard_.num_kv_heads, config_.head_dim};
  if (fp8_weight_only_)
    for (const LayerWeights& l : weights_.layers)
      for (const Tensor* m : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down})
        limits.fp8_weight_only_elems = std::max(limits.fp8_weight_only_elems, m->numel());
  backend.reserve_steps(limits);
  const std::vector<float> inv_freq = config_.rope_inv_freq();
  inv_freq_ = Buffer(backend, inv_freq.size() * sizeof(float));
  backend.copy_to_device(inv_freq_.data(), inv_freq.data(), inv_freq.size() * sizeof(float));
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::attach_tp_peers(std::vector<TpPeer> peers) {
  SERVE8_CHECK(comm_ && shard_.rank == 0 && static_cast<int>(peers.size()) == shard_.size - 1,
               "model: attach_tp_peers on rank {} of {} with {} peers", shard_.rank, shard_.size, peers.size());
  group_ = std::make_unique<TpGroup>(*this, std::move(peers));
}

void LlamaModel::attach_tp_group(std::vector<TpPeer> local_peers, int64_t num_slots, std::shared_ptr<void> keepalive) {
  SERVE8_CHECK(comm_ && shard_.rank == 0, "model: attach_tp_group on rank {} of {}", shard_.rank, shard_.size);
  group_ = std::make_unique<TpGroup>(*this, std::move(local_peers), num_slots, std::move(keepalive));
}

double LlamaModel::decode_weight_bytes() const {
  const double weights = static_cast<double>(weights_.bytes);
  if (config_.tie_word_embeddings) return weights;
  const double per_param = weights / static_cast<double>(config_.num_parameters());
  return weights - per_param * config_.vocab_size * static_cast<double>(config_.hidden_size);
}

size_t LlamaModel::activation_bytes() const {
  size_t n = 0;
  for (const Buffer* b : {&residual_, &normed_, &qkv_, &q_, &attn_out_, &proj_out_, &gate_up_, &act_, &last_hidden_,
                          &logits_, &inv_freq_, &act_q_, &act_scale_})
    n += b->bytes();
  return n;
}

Tensor LlamaModel::forward(const ForwardBatch& batch, KvCache& kv) {
  return group_ ? group_->forward(batch, kv) : forward_rank(batch, kv);
}

Tensor LlamaModel::forward_rank(const ForwardBatch& batch, KvCache& kv) {
  const int t = batch.num_tokens();
  const int b = batch.num_seqs();
  SERVE8_CHECK(t <= max_tokens_ && b <= max_seqs_, "forward: {} tokens in {} sequences exceed the model's {} / {}", t,
               b, max_tokens_, max_seqs_);
  if (!graphs_.empty()) {
    Tensor logits = forward_graph(batch, kv);
    if (!logits.empty()) {
      last_step_tokens_ = 0;  // a graph's hidden states are not logits_of_rows's to read
      return logits;
    }
  }
  return forward_uploaded(backend_.upload_batch(batch, kv), kv);
}

Tensor LlamaModel::forward_uploaded(const DeviceBatch& db, KvCache& kv) {
  const int t = db.num_tokens;
  const int b = db.num_seqs;
  const DType c = backend_.compute_dtype();
  const int64_t h = config_.hidden_size;
  Tensor residual = residual_.view(c, {t, h});
  Tensor normed = normed_.view(c, {t, h});
  Tensor proj_out = proj_out_.view(c, {t, h});

  if (comm_) {  // vocabulary-parallel: each token's row comes from the one rank that holds it
    backend_.embedding_shard(weights_.embed, db.tokens, shard_.vocab_begin, residual);
    comm_->all_reduce_sum(residual);
  } else {
    backend_.embedding(weights_.embed, db.tokens, residual);
  }
  backend_.rmsnorm(residual, weights_.layers[0].attn_norm, config_.rms_norm_eps, normed);
  GemmInput in = gemm_input(normed, weights_.layers[0].wqkv);
  for (int l = 0; l < config_.num_layers; ++l) {
    run_layer(l, db, kv.layer(l), in);
    // proj_out holds the MLP output: add it to the stream and normalize for whatever comes next.
    const bool last = l + 1 == config_.num_layers;
    const LayerWeights* next = last ? nullptr : &weights_.layers[static_cast<size_t>(l) + 1];
    const std::optional<Fp8Rows> rows = next ? fp8_rows_for(next->wqkv, t, h) : std::nullopt;
    backend_.add_rmsnorm(proj_out, residual, next ? next->attn_norm : weights_.final_norm, config_.rms_norm_eps, normed,
                         rows ? &*rows : nullptr);
    in = made_input(normed, rows);
  }
  Tensor last = last_hidden_.view(c, {b, h});
  backend_.gather_rows(normed, db.last_token_rows, last);
  Tensor logits = lm_head(last);
  last_step_tokens_ = t;
  return logits;
}

Tensor LlamaModel::lm_head(const Tensor& last) {
  const int64_t n = last.dim(0);
  Tensor logits = logits_.view(DType::kF32, {n, config_.vocab_size});
  if (!comm_) {
    backend_.gemm(last, weights_.lm_head, nullptr, logits);
    return logits;
  }
  Tensor part = logits_shard_.view(DType::kF32, {n, shard_.vocab_size});
  backend_.gemm(last, weights_.lm_head, nullptr, part);
  comm_->all_gather(part, logits);
  return logits;
}

Tensor LlamaModel::logits_of_rows(std::span<const int32_t> rows) {
  return group_ ? group_->logits_of_rows(rows) : logits_of_rows_rank(rows);
}

Tensor LlamaModel::logits_of_rows_rank(std::span<const int32_t> rows) {
  const auto n = static_cast<int64_t>(rows.size());
  SERVE8_CHECK(n > 0 && n <= max_seqs_, "logits_of_rows: {} rows, 1 to {} allowed", n, max_seqs_);
  for (int32_t r : rows)
    SERVE8_CHECK(r >= 0 && r < last_step_tokens_, "logits_of_rows: row {} is outside the last step's {} tokens", r,
                 last_step_tokens_);
  backend_.copy_to_device(row_ids_.data(), rows.data(), rows.size_bytes());
  const DType c = backend_.compute_dtype();
  const int64_t h = config_.hidden_size;
  Tensor last = last_hidden_.view(c, {n, h});
  backend_.gather_rows(normed_.view(c, {last_step_tokens_, h}), row_ids_.view(DType::kI32, {n}), last);
  return lm_head(last);
}

std::optional<Fp8Rows> LlamaModel::fp8_rows_for(const Tensor& w, int64_t t, int64_t k) {
  if (w.dtype != DType::kFP8E4M3 || fp8_weight_only_) return std::nullopt;
  return Fp8Rows{act_q_.view(DType::kFP8E4M3, {t, k}), act_scale_.view(DType::kF32, {t})};
}

LlamaModel::GemmInput LlamaModel::made_input(const Tensor& x, const std::optional<Fp8Rows>& rows) {
  return rows ? GemmInput{x, rows->q, rows->scale} : GemmInput{x, {}, {}};
}

LlamaModel::GemmInput LlamaModel::gemm_input(const Tensor& x, const Tensor& w) {
  const std::optional<Fp8Rows> rows = fp8_rows_for(w, x.dim(0), x.dim(1));
  if (rows) backend_.quantize_fp8_rows(x, rows->q, rows->scale);
  return made_input(x, rows);
}

void LlamaModel::linear(const GemmInput& in, const Tensor& w, const Tensor& w_scale, const Tensor* bias, Tensor out) {
  if (w.dtype == DType::kFP8E4M3 && fp8_weight_only_) {
    backend_.gemm_fp8_weights(in.x, w, w_scale, bias, out);
  } else if (w.dtype == DType::kFP8E4M3) {
    backend_.gemm_fp8(in.xq, in.xs, w, w_scale, bias, out);
  } else {
    backend_.gemm(in.x, w, bias, out);
  }
}

void LlamaModel::run_layer(int l, const DeviceBatch& db, const KvLayer& kv, const GemmInput& in) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  const DType c = backend_.compute_dtype();
  const int64_t t = in.x.dim(0);
  const int64_t h = config_.hidden_size;
  const int64_t d = config_.head_dim;
  const int64_t qs = shard_.q_size(config_.head_dim);
  const int64_t kvs = shard_.kv_size(config_.head_dim);
  const int64_t heads = shard_.num_heads, kv_heads = shard_.num_kv_heads, inter = shard_.intermediate_size;
  // One QKV GEMM: each token's q, k and v heads in one row of qkv_; rope_kv_store rotates q into
  // q_, where attention wants it contiguous, and puts k and v into the pool.
  const Tensor qkv = qkv_.view(c, {t, heads + 2 * kv_heads, d});
  Tensor q = q_.view(c, {t, heads, d});
  if (linear_observer_) linear_observer_(l, Matrix::kQkv, in.x);
  linear(in, w.wqkv, w.wqkv_scale, w.bqkv.empty() ? nullptr : &w.bqkv, qkv.reshape({t, qs + 2 * kvs}));
  backend_.rope_kv_store(qkv, q, db.positions, inv_freq_.view(DType::kF32, {d / 2}), db, kv);
  if (kv_observer_) kv_observer_(l, qkv);
  Tensor attn = attn_out_.view(c, {t, heads, d});
  backend_.attention(q, kv, db, softmax_scale_, attn);
  Tensor proj_out = proj_out_.view(c, {t, h});
  if (linear_observer_) linear_observer_(l, Matrix::kO, attn.reshape({t, qs}));
  linear(gemm_input(attn.reshape({t, qs}), w.wo), w.wo, w.wo_scale, nullptr, proj_out);
  if (comm_) comm_->all_reduce_sum(proj_out);  // o_proj is row-parallel: each rank has a partial sum

  Tensor residual = residual_.view(c, {t, h});
  Tensor normed = normed_.view(c, {t, h});
  const std::optional<Fp8Rows> normed_rows = fp8_rows_for(w.w_gate_up, t, h);
  backend_.add_rmsnorm(proj_out, residual, w.ffn_norm, config_.rms_norm_eps, normed,
                       normed_rows ? &*normed_rows : nullptr);
  Tensor gate_up = gate_up_.view(c, {t, 2 * inter});
  if (linear_observer_) linear_observer_(l, Matrix::kGateUp, normed);
  linear(made_input(normed, normed_rows), w.w_gate_up, w.w_gate_up_scale, nullptr, gate_up);
  Tensor act = act_.view(c, {t, inter});
  const std::optional<Fp8Rows> act_rows = fp8_rows_for(w.w_down, t, inter);
  backend_.silu_mul(gate_up, act, act_rows ? &*act_rows : nullptr);
  if (linear_observer_) linear_observer_(l, Matrix::kDown, act);
  linear(made_input(act, act_rows), w.w_down, w.w_down_scale, nullptr, proj_out);
  if (comm_) comm_->all_reduce_sum(proj_out);  // down is row-parallel too
}

LoadedLlama load_llama_weights_of(const LoadOptions& options, Backend& backend) {
  const bool builtin = is_builtin_model_path(options.model_path);
  if (!builtin && options.model_path.ends_with(".gguf")) {
    SERVE8_CHECK(options.load_format == "auto" || options.load_format == "gguf" || options.load_format == "dummy",
                 "--load-format {} cannot read {}", options.load_format, options.model_path);
    const GgufFile file(options.model_path);
    ModelConfig config = gguf_model_config(file);
    check_weights_fit(config, backend, options.quantization, options.model_path);
    LlamaWeights weights = options.load_format == "dummy"
                               ? dummy_llama_weights(config, backend, options.seed, options.quantization)
                               : load_gguf_weights(config, file, backend, options.quantization);
    return {std::move(config), std::move(weights)};
  }
  ModelConfig config = builtin ? builtin_tiny_llama_config() : load_model_config(options.model_path);
  check_weights_fit(config, backend, options.quantization, options.model_path);
  LlamaWeights weights;
  if (builtin || options.load_format == "dummy") {
    spdlog::info("model: dummy weights (seed {}) for {} ({} layers, hidden {}, {} params)", options.seed,
                 config.architecture, config.num_layers, config.hidden_size, config.num_parameters());
    weights = dummy_llama_weights(config, backend, options.seed, options.quantization);
  } else {
    SERVE8_CHECK(options.load_format == "auto" || options.load_format == "safetensors",
                 "unknown --load-format '{}' (expected auto, safetensors or dummy)", options.load_format);
    weights = load_llama_weights(config, options.model_path, backend, options.quantization);
  }
  spdlog::info("model: {} layers, {} heads / {} kv heads, head_dim {}, vocab {}; weights {:.2f} GiB ({})",
               config.num_layers, config.num_heads, config.num_kv_heads, config.head_dim, config.vocab_size,
               static_cast<double>(weights.bytes) / (1 << 30), weight_dtype_name(weights, backend.compute_dtype()));
  return {std::move(config), std::move(weights)};
}

std::unique_ptr<LlamaModel> load_llama_model(const LoadOptions& options, Backend& backend, int max_tokens,
                                             int max_seqs) {
  LoadedLlama m = load_llama_weights_of(options, backend);
  return std::make_unique<LlamaModel>(std::move(m.config), std::move(m.weights), backend, max_tokens, max_seqs);
}

}  // namespace serve8
