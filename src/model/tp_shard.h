// Tensor-parallel sharding of a Llama-family model (Megatron style, DESIGN.md): what rank r of N
// holds. Attention splits by KV-head group (rank r takes KV heads [r Hkv / N, (r+1) Hkv / N) and
// their query heads), the MLP by intermediate columns (gate/up column-parallel, down
// row-parallel), o_proj row-parallel, and the embedding and LM head by vocabulary rows. Uneven
// splits are allowed; every rank needs at least one KV head.
#pragma once

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace serve8 {

struct TpShard {
  int rank = 0;
  int size = 1;
  int kv_head_begin = 0, num_kv_heads = 0;  // this rank's KV heads
  int q_head_begin = 0, num_heads = 0;      // and their query heads
  int inter_begin = 0, intermediate_size = 0;
  int vocab_begin = 0, vocab_size = 0;
  int q_size(int head_dim) const { return num_heads * head_dim; }
  int kv_size(int head_dim) const { return num_kv_heads * head_dim; }
};

// Rank `rank` of `size`; throws naming --tp-size when size exceeds the model's KV heads.
TpShard tp_shard(const ModelConfig& config, int rank, int size);

// Rank s's slice of `full` (on `from`), copied into new buffers of `to`. FP8 matrices keep their
// row scales: sliced with the rows of column-parallel matrices, whole for row-parallel ones.
LlamaWeights shard_llama_weights(const LlamaWeights& full, const ModelConfig& config, const TpShard& s, Backend& from,
                                 Backend& to);

// Rank s's KV heads of per-layer, per-head scales ([num_layers * num_kv_heads], layer-major).
KvScales shard_kv_scales(const KvScales& scales, const ModelConfig& config, const TpShard& s);

}  // namespace serve8
