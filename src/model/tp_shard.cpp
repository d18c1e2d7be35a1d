#include "model/tp_shard.h"

#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"

namespace serve8 {

namespace {

// [begin, end) of n items split over `size` ranks: rank r takes [r n / size, (r+1) n / size).
std::pair<int, int> split(int n, int rank, int size) {
  const auto b = static_cast<int>(int64_t{n} * rank / size), e = static_cast<int>(int64_t{n} * (rank + 1) / size);
  return {b, e - b};
}

struct RowRange {
  int64_t begin, count;
};

// Copies rows `ranges` x columns [col, col + cols) of src (1-D tensors are rows of width one)
// through host memory into one new buffer of `to`, the ranges laid end to end.
class Slicer {
 public:
  Slicer(Backend& from, Backend& to, LlamaWeights& out) : from_(from), to_(to), out_(out) {}

  Tensor take(const Tensor& src, std::initializer_list<RowRange> ranges, int64_t col, int64_t cols) {
    if (src.empty()) return {};
    const int64_t width = src.ndim == 2 ? src.dim(1) : 1;
    const size_t esize = dtype_size(src.dtype);
    int64_t rows = 0;
    for (const RowRange& r : ranges) rows += r.count;
    std::vector<uint8_t> host(src.nbytes()), slice(static_cast<size_t>(rows * cols) * esize);
    from_.copy_to_host(host.data(), src.data, src.nbytes());
    uint8_t* dst = slice.data();
    for (const RowRange& r : ranges) {
      for (int64_t i = r.begin; i < r.begin + r.count; ++i) {
        std::memcpy(dst, host.data() + static_cast<size_t>(i * width + col) * esize, static_cast<size_t>(cols) * esize);
        dst += static_cast<size_t>(cols) * esize;
      }
    }
    Buffer buf(to_, slice.size());
    to_.copy_to_device(buf.data(), slice.data(), slice.size());
    Tensor t = src.ndim == 2 ? buf.view(src.dtype, {rows, cols}) : buf.view(src.dtype, {rows});
    out_.storage.push_back(std::move(buf));
    return t;
  }
  // A replicated tensor (norms, the row scales of a row-parallel matrix).
  Tensor whole(const Tensor& src) {
    return take(src, {{0, src.empty() ? 0 : src.dim(0)}}, 0, src.ndim == 2 ? src.dim(1) : 1);
  }

 private:
  Backend& from_;
  Backend& to_;
  LlamaWeights& out_;
};

}  // namespace

TpShard tp_shard(const ModelConfig& c, int rank, int size) {
  SERVE8_CHECK(size >= 1 && rank >= 0 && rank < size, "tensor parallel: rank {} of {}", rank, size);
  SERVE8_CHECK(size <= c.num_kv_heads,
               "--tp-size {} exceeds the model's {} KV heads: each rank needs at least one KV head", size,
               c.num_kv_heads);
  TpShard s;
  s.rank = rank;
  s.size = size;
  std::tie(s.kv_head_begin, s.num_kv_heads) = split(c.num_kv_heads, rank, size);
  s.q_head_begin = s.kv_head_begin * c.group_size();
  s.num_heads = s.num_kv_heads * c.group_size();
  std::tie(s.inter_begin, s.intermediate_size) = split(c.intermediate_size, rank, size);
  std::tie(s.vocab_begin, s.vocab_size) = split(c.vocab_size, rank, size);
  return s;
}

LlamaWeights shard_llama_weights(const LlamaWeights& full, const ModelConfig& c, const TpShard& s, Backend& from,
                                 Backend& to) {
  LlamaWeights w;
  Slicer slice(from, to, w);
  const int64_t d = c.head_dim, h = c.hidden_size, inter = c.intermediate_size;
  const int64_t q = c.q_size(), kv = c.kv_size();
  const int64_t q0 = s.q_head_begin * d, qn = s.q_size(c.head_dim);
  const int64_t k0 = s.kv_head_begin * d, kn = s.kv_size(c.head_dim);
  const int64_t i0 = s.inter_begin, in = s.intermediate_size;
  // Column-parallel (output rows split): this rank's q, k and v rows; its gate and up rows.
  const std::initializer_list<RowRange> qkv_rows = {{q0, qn}, {q + k0, kn}, {q + kv + k0, kn}};
  const std::initializer_list<RowRange> gate_up_rows = {{i0, in}, {inter + i0, in}};
  w.embed = slice.take(full.embed, {{s.vocab_begin, s.vocab_size}}, 0, h);
  for (const LayerWeights& f : full.layers) {
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = slice.whole(f.attn_norm);
    l.ffn_norm = slice.whole(f.ffn_norm);
    l.wqkv = slice.take(f.wqkv, qkv_rows, 0, h);
    l.wqkv_scale = slice.take(f.wqkv_scale, qkv_rows, 0, 1);
    l.bqkv = slice.take(f.bqkv, qkv_rows, 0, 1);
    l.w_gate_up = slice.take(f.w_gate_up, gate_up_rows, 0, h);
    l.w_gate_up_scale = slice.take(f.w_gate_up_scale, gate_up_rows, 0, 1);
    // Row-parallel (input columns split): every output row, and so every row scale, stays.
    l.wo = slice.take(f.wo, {{0, h}}, q0, qn);
    l.wo_scale = slice.whole(f.wo_scale);
    l.w_down = slice.take(f.w_down, {{0, h}}, i0, in);
    l.w_down_scale = slice.whole(f.w_down_scale);
  }
  w.final_norm = slice.whole(full.final_norm);
  w.lm_head = c.tie_word_embeddings ? w.embed : slice.take(full.lm_head, {{s.vocab_begin, s.vocab_size}}, 0, h);
  for (const Buffer& b : w.storage) w.bytes += b.bytes();
  return w;
}

KvScales shard_kv_scales(const KvScales& scales, const ModelConfig& c, const TpShard& s) {
  KvScales out;
  for (int l = 0; l < c.num_layers; ++l) {
    const auto begin = static_cast<size_t>(l * c.num_kv_heads + s.kv_head_begin);
    const auto end = begin + static_cast<size_t>(s.num_kv_heads);
    out.k.insert(out.k.end(), scales.k.begin() + static_cast<std::ptrdiff_t>(begin),
                 scales.k.begin() + static_cast<std::ptrdiff_t>(end));
    out.v.insert(out.v.end(), scales.v.begin() + static_cast<std::ptrdiff_t>(begin),
                 scales.v.begin() + static_cast<std::ptrdiff_t>(end));
    const auto d = static_cast<std::ptrdiff_t>(c.head_dim);
    for (auto [src, dst] : {std::pair{&scales.k_mean, &out.k_mean}, std::pair{&scales.v_mean, &out.v_mean}})
      if (!src->empty())
        dst->insert(dst->end(), src->begin() + static_cast<std::ptrdiff_t>(begin) * d,
                    src->begin() + static_cast<std::ptrdiff_t>(end) * d);
  }
  return out;
}

}  // namespace serve8
