// LlamaModel's CUDA-graph path for decode steps. A decode step of a 7B model is ~10 launches per
// layer of a few microseconds of work each at small batch sizes; replaying them as one graph takes
// the launch overhead off the critical path. Graphs bake in buffer addresses and grid shapes, so
// one is captured per bucketed batch size and a step is padded up to its bucket: padded rows
// decode token 0 at position 0 into slot 0, which the allocator reserves for exactly this.
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "model/llama.h"

namespace serve8 {

namespace {

bool same_buffers(const DeviceBatch& a, const DeviceBatch& b) {
  return a.tokens.data == b.tokens.data && a.positions.data == b.positions.data &&
         a.out_slots.data == b.out_slots.data && a.qo_indptr.data == b.qo_indptr.data &&
         a.kv_indptr.data == b.kv_indptr.data && a.kv_indices.data == b.kv_indices.data &&
         a.last_token_rows.data == b.last_token_rows.data && a.num_seqs == b.num_seqs && a.num_tokens == b.num_tokens;
}

// Appends decode rows over slot 0 until the batch has `n` sequences.
void pad_decode_batch(ForwardBatch& b, int n) {
  while (b.num_seqs() < n) {
    b.tokens.push_back(0);
    b.positions.push_back(0);
    b.out_slots.push_back(0);
    b.kv_indices.push_back(0);
    b.qo_indptr.push_back(b.qo_indptr.back() + 1);
    b.kv_indptr.push_back(b.kv_indptr.back() + 1);
  }
}

}  // namespace

std::vector<int> LlamaModel::graph_batch_sizes(int max_bs) {
  // As SGLang: powers of two to 8, then every multiple of 8 (padding wastes at most 7 rows).
  std::vector<int> sizes;
  for (int bs : {1, 2, 4, 8})
    if (bs <= max_bs) sizes.push_back(bs);
  for (int bs = 16; bs <= max_bs; bs += 8) sizes.push_back(bs);
  if (max_bs > 0 && (sizes.empty() || sizes.back() != max_bs)) sizes.push_back(max_bs);
  return sizes;
}

int LlamaModel::enable_decode_graphs(KvCache& kv, int max_bs) {
  disable_decode_graphs();
  SERVE8_CHECK(max_bs >= 1, "--cuda-graph-max-bs {} must be at least 1", max_bs);
  max_bs = std::min(max_bs, max_seqs_);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> sizes = graph_batch_sizes(max_bs);
  graph_kv_ = &kv;
  // Largest first: workspaces grow to their final size in its warm-up, never inside a capture.
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    padded_ = ForwardBatch{};
    padded_.qo_indptr.assign(1, 0);
    padded_.kv_indptr.assign(1, 0);
    pad_decode_batch(padded_, *it);
    DecodeGraph g;
    g.batch_size = *it;
    const DeviceBatch db = backend_.upload_batch(padded_);
    forward_uploaded(db, kv);  // warm-up: lazily made plans, workspaces and GEMM heuristics
    capture_graph(g, db, kv);
    if (!g.graph) {
      graphs_.clear();
      graph_kv_ = nullptr;
      return 0;
    }
    graphs_.push_back(std::move(g));
  }
  std::reverse(graphs_.begin(), graphs_.end());
  backend_.synchronize();
  spdlog::info("CUDA graphs: captured {} decode batch sizes (1..{}) in {:.2f} s", graphs_.size(), max_bs,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return static_cast<int>(graphs_.size());
}

void LlamaModel::disable_decode_graphs() {
  graphs_.clear();
  graph_kv_ = nullptr;
}

void LlamaModel::capture_graph(DecodeGraph& g, const DeviceBatch& db, KvCache& kv) {
  g.graph = backend_.capture([&] { forward_uploaded(db, kv); });
  g.captured = db;
  g.captured.host = nullptr;  // the host arrays of the capture are not kept
}

Tensor LlamaModel::forward_graph(const ForwardBatch& batch, KvCache& kv) {
  const int b = batch.num_seqs();
  if (kv_observer_ || &kv != graph_kv_ || b == 0 || b > graphs_.back().batch_size ||
      batch.num_tokens() != b)  // q_len >= 1 for every row, so T == B means all rows decode
    return {};
  // No validate() here: upload_batch validates the padded batch, valid exactly when this one is.
  // The kernels index the pool without bounds checks, and the backend's own check of the slots
  // does not run when a graph replays.
  const int64_t slots = kv.config().num_slots;
  auto in_pool = [slots](int32_t s) { return s >= 0 && s < slots; };
  SERVE8_CHECK(std::all_of(batch.out_slots.begin(), batch.out_slots.end(), in_pool) &&
                   std::all_of(batch.kv_indices.begin(), batch.kv_indices.end(), in_pool),
               "forward: a slot of the batch is outside the pool's {} slots", slots);
  DecodeGraph& g =
      *std::find_if(graphs_.begin(), graphs_.end(), [b](const DecodeGraph& x) { return x.batch_size >= b; });
  padded_ = batch;
  pad_decode_batch(padded_, g.batch_size);
  const DeviceBatch db = backend_.upload_batch(padded_);
  // Batch buffers move when a longer batch makes them grow: capture again on the new ones.
  if (!same_buffers(db, g.captured)) {
    capture_graph(g, db, kv);
    SERVE8_CHECK(g.graph != nullptr, "forward: recapturing the CUDA graph of batch size {} failed", g.batch_size);
    spdlog::debug("CUDA graphs: recaptured batch size {} (batch buffers moved)", g.batch_size);
  }
  g.graph->replay();
  return logits_.view(DType::kF32, {g.batch_size, config_.vocab_size}).rows(0, b);
}

}  // namespace serve8
